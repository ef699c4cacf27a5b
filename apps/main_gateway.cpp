// tutti-gateway: the gateway's commands alone, linked without any training
// or serving part.

#include "command_table.hpp"

int main(int argc, char** argv) {
  using namespace tutti::cli;
  return run_program("tutti-gateway", {gateway_commands()}, argc, argv);
}
