#pragma once
// The subcommands of `tutti data` that live in their own files.

#include <string>
#include <vector>

namespace tutti::cli {

int data_prepare(const std::vector<std::string>& args);
int data_tokenizer(const std::vector<std::string>& args);
int data_bench(const std::vector<std::string>& args);
int data_warm(const std::vector<std::string>& args);

} // namespace tutti::cli
