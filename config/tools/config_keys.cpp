// config_keys: the config key reference, docs/config-reference.md,
// generated from the declarations.
//
//   config_keys                 print it
//   config_keys --check FILE    exit 1 unless FILE is it
//   config_keys --update FILE   write it to FILE

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tutti/config/key_reference.hpp"

namespace {

int usage() {
  std::cerr << "usage: config_keys [--check FILE | --update FILE]\n";
  return 2;
}

// The first line where `a` and `b` differ, as "line N: ...".
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream x(a), y(b);
  std::string lx, ly;
  for (int line = 1;; ++line) {
    const bool hx = static_cast<bool>(std::getline(x, lx));
    const bool hy = static_cast<bool>(std::getline(y, ly));
    if (!hx && !hy)
      return "";
    if (hx != hy || lx != ly)
      return "line " + std::to_string(line) + ": file has '"
             + (hx ? lx : "(nothing)") + "', declarations give '"
             + (hy ? ly : "(nothing)") + "'";
  }
}

} // namespace

int main(int argc, char** argv) {
  const auto reference = tutti::config_reference_document();
  if (argc == 1) {
    std::cout << reference;
    return 0;
  }
  if (argc != 3)
    return usage();
  const std::string mode = argv[1], path = argv[2];
  if (mode == "--update") {
    std::ofstream out(path, std::ios::trunc);
    out << reference;
    if (!out) {
      std::cerr << path << ": cannot write\n";
      return 2;
    }
    return 0;
  }
  if (mode != "--check")
    return usage();
  std::ifstream in(path);
  if (!in) {
    std::cerr << path << ": cannot open\n";
    return 2;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  if (buf.str() == reference)
    return 0;
  std::cerr << path << ": the config key reference is out of date ("
            << first_difference(buf.str(), reference)
            << "); run config_keys --update " << path << "\n";
  return 1;
}
