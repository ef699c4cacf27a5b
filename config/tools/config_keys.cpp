// config_keys: the config key reference, generated from the declarations.
//
//   config_keys                 print the Markdown table
//   config_keys --check FILE    exit 1 unless FILE's marked section is it
//   config_keys --update FILE   write it into FILE's marked section

#include <cstdio>
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

struct marked_file {
  std::string head, section, tail; // section: between the marker lines
};

// Splits `text` at the marker lines; false if they are missing.
bool split(const std::string& text, marked_file& out) {
  const std::string begin = std::string(tutti::key_reference_begin) + "\n";
  const std::string end = std::string(tutti::key_reference_end) + "\n";
  const auto b = text.find(begin);
  const auto e = b == std::string::npos ? b : text.find(end, b);
  if (e == std::string::npos)
    return false;
  out.head = text.substr(0, b + begin.size());
  out.section = text.substr(b + begin.size(), e - b - begin.size());
  out.tail = text.substr(e);
  return true;
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
      return "line " + std::to_string(line) + " of the table: file has '"
             + (hx ? lx : "(nothing)") + "', declarations give '"
             + (hy ? ly : "(nothing)") + "'";
  }
}

} // namespace

int main(int argc, char** argv) {
  const auto table = tutti::config_key_reference();
  if (argc == 1) {
    std::cout << table;
    return 0;
  }
  if (argc != 3)
    return usage();
  const std::string mode = argv[1], path = argv[2];
  if (mode != "--check" && mode != "--update")
    return usage();
  std::ifstream in(path);
  if (!in) {
    std::cerr << path << ": cannot open\n";
    return 2;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  marked_file file;
  if (!split(buf.str(), file)) {
    std::cerr << path << ": no lines " << tutti::key_reference_begin << " and "
              << tutti::key_reference_end << "\n";
    return 2;
  }
  if (mode == "--check") {
    if (file.section == table)
      return 0;
    std::cerr << path << ": the config key reference is out of date ("
              << first_difference(file.section, table)
              << "); run config_keys --update " << path << "\n";
    return 1;
  }
  std::ofstream out(path, std::ios::trunc);
  out << file.head << table << file.tail;
  if (!out) {
    std::cerr << path << ": cannot write\n";
    return 2;
  }
  return 0;
}
