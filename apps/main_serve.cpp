// tutti-serve: serving's commands alone, linked without any training part
// (a serving image needs no more).

#include "command_table.hpp"

int main(int argc, char** argv) {
  using namespace tutti::cli;
  return run_program("tutti-serve", {serve_commands()}, argc, argv);
}
