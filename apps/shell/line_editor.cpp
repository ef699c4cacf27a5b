#include "line_editor.hpp"

#include <histedit.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

namespace tutti::shell {

namespace {

constexpr int history_size = 1000;
constexpr size_t max_listed =
  200; // a huge actor tree should not flood the screen

line_editor* owner_of(EditLine* el) {
  void* data = nullptr;
  el_get(el, EL_CLIENTDATA, &data);
  return static_cast<line_editor*>(data);
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return std::isspace(c); });
}

std::string longest_common_prefix(const std::vector<std::string>& words) {
  std::string prefix = words.front();
  for (const auto& w : words) {
    size_t n = 0;
    while (n < prefix.size() && n < w.size() && prefix[n] == w[n])
      ++n;
    prefix.resize(n);
  }
  return prefix;
}

int terminal_columns() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 80;
}

} // namespace

line_editor::line_editor(std::string program, std::string history_path,
                         completer complete)
  : program_(std::move(program)), history_path_(std::move(history_path)),
    complete_(std::move(complete)) {
  HistEvent ev;
  history_ = history_init();
  ::history(history_, &ev, H_SETSIZE, history_size);
  ::history(history_, &ev, H_SETUNIQUE, 1);
  load_history();

  el_ = el_init(program_.c_str(), stdin, stdout, stderr);
  el_set(el_, EL_CLIENTDATA, this);
  el_set(el_, EL_EDITOR, "emacs");
  el_set(el_, EL_SIGNAL, 1); // restore the terminal on signals, follow resizes
  el_set(el_, EL_PROMPT, &line_editor::prompt_of);
  el_set(el_, EL_HIST, ::history, history_);
  el_set(el_, EL_ADDFN, "tutti-complete", "complete the word under the cursor",
         &line_editor::on_tab);
  el_set(el_, EL_BIND, "^I", "tutti-complete", nullptr);
  el_source(el_, nullptr); // ~/.editrc last, so a user's bindings (vi mode) win
}

line_editor::~line_editor() {
  el_end(el_); // also puts the terminal back
  history_end(history_);
}

bool line_editor::read_line(const std::string& prompt, std::string& out) {
  prompt_ = prompt;
  line_after_tab_.clear();
  cursor_after_tab_ = -1;
  int count = 0;
  errno = 0;
  const char* line = el_gets(el_, &count);
  if (line == nullptr || count <= 0) {
    // A signal the caller handles (Ctrl-C) interrupts the read: drop the
    // line and let the caller prompt again on a fresh line.
    if (count == -1 && errno == EINTR) {
      std::fputc('\n', stdout);
      std::fflush(stdout);
      out.clear();
      return true;
    }
    return false;
  }
  out.assign(line, static_cast<size_t>(count));
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return true;
}

void line_editor::add_history(const std::string& line) {
  if (is_blank(line))
    return;
  // A completion leaves a trailing space; without it repeats compare equal.
  std::string entry = line.substr(0, line.find_last_not_of(" \t") + 1);
  HistEvent ev;
  ::history(history_, &ev, H_ENTER, entry.c_str());
  save_history();
}

char* line_editor::prompt_of(EditLine* el) {
  // libedit wants a char* but only reads it.
  return const_cast<char*>(owner_of(el)->prompt_.c_str());
}

unsigned char line_editor::on_tab(EditLine* el, int /*key*/) {
  try {
    return owner_of(el)->complete();
  } catch (...) { // never unwind through C
    return CC_ERROR;
  }
}

unsigned char line_editor::complete() {
  const LineInfo* info = el_line(el_);
  std::string before(info->buffer, info->cursor);
  size_t word_start = before.find_last_of(" \t");
  std::string word = before.substr(
    word_start == std::string::npos ? 0 : word_start + 1);

  std::vector<std::string> candidates;
  for (auto& c : complete_(before))
    if (c.compare(0, word.size(), word) == 0)
      candidates.push_back(std::move(c));
  if (candidates.empty())
    return CC_REFRESH_BEEP;

  bool second_tab = cursor_after_tab_ == info->cursor - info->buffer
                    && line_after_tab_
                         == std::string(info->buffer, info->lastchar);
  unsigned char result = CC_REFRESH;
  std::string insert;
  if (candidates.size() == 1) {
    insert = candidates.front().substr(word.size()) + " ";
  } else {
    insert = longest_common_prefix(candidates).substr(word.size());
    if (insert.empty()) {
      if (second_tab) {
        list_candidates(candidates);
        result = CC_REDISPLAY;
      } else {
        result = CC_REFRESH_BEEP;
      }
    }
  }
  if (!insert.empty() && el_insertstr(el_, insert.c_str()) == -1)
    return CC_ERROR;

  info = el_line(el_);
  line_after_tab_.assign(info->buffer, info->lastchar);
  cursor_after_tab_ = info->cursor - info->buffer;
  return result;
}

void line_editor::list_candidates(const std::vector<std::string>& candidates) {
  size_t shown = std::min(candidates.size(), max_listed);
  size_t width = 0;
  for (size_t i = 0; i < shown; ++i)
    width = std::max(width, candidates[i].size());
  width += 2;
  size_t per_row = std::max<size_t>(1, static_cast<size_t>(terminal_columns())
                                         / width);

  std::string text = "\n";
  for (size_t i = 0; i < shown; ++i) {
    bool row_end = (i + 1) % per_row == 0 || i + 1 == shown;
    text += candidates[i];
    text += row_end ? std::string("\n")
                    : std::string(width - candidates[i].size(), ' ');
  }
  if (shown < candidates.size())
    text += "... and " + std::to_string(candidates.size() - shown) + " more\n";
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

void line_editor::load_history() {
  namespace fs = std::filesystem;
  if (history_path_.empty()) {
    history_writable_ = false;
    return;
  }
  std::error_code ec;
  fs::path path(history_path_);
  // A missing or empty file starts a new history; libedit refuses to load
  // an empty one.
  if (!fs::exists(path, ec)
      || (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 0)) {
    if (path.has_parent_path())
      fs::create_directories(path.parent_path(), ec);
    save_history();
    return;
  }
  HistEvent ev;
  if (::history(history_, &ev, H_LOAD, history_path_.c_str()) < 0) {
    // Not a libedit history (or unreadable): never overwrite someone's file.
    history_problem_ = "cannot read history file " + history_path_
                       + "; history will not be saved";
    history_writable_ = false;
  }
}

void line_editor::save_history() {
  if (!history_writable_)
    return;
  // Write aside and rename, so a shell killed mid-write leaves the old file.
  std::string temporary = history_path_ + ".tmp";
  HistEvent ev;
  if (::history(history_, &ev, H_SAVE, temporary.c_str()) < 0
      || std::rename(temporary.c_str(), history_path_.c_str()) != 0) {
    history_problem_ = "cannot write history file " + history_path_;
    std::remove(temporary.c_str());
    return;
  }
  history_problem_.clear();
}

} // namespace tutti::shell
