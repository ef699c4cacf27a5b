// tutti: every command of the command table (command_table.hpp).

#include "command_table.hpp"

int main(int argc, char** argv) {
  using namespace tutti::cli;
  return run_program("tutti",
                     {job_commands(), client_commands(), serve_commands(),
                      gateway_commands(), security_commands(),
                      operations_commands()},
                     argc, argv);
}
