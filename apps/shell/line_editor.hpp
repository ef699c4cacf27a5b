#pragma once
// Line editing for `tutti shell` on a terminal: emacs keys, history kept in
// a file, Tab completion. Wraps BSD libedit's native API (histedit.h); GNU
// readline is ruled out by its license. Only for a terminal on stdin: the
// caller reads plain lines otherwise.
//
// Ctrl-C: libedit (EL_SIGNAL) restores the terminal and passes the signal
// on. A caller that installs a SIGINT handler without SA_RESTART gets
// read_line() == true with an empty line: the typed line is dropped.

#include <functional>
#include <string>
#include <vector>

// libedit's handles, declared here so that users of this header do not need
// libedit's headers.
struct editline;
struct history;

namespace tutti::shell {

class line_editor {
public:
  // Candidate full words for the word under the cursor, given the text
  // before the cursor (see complete_command_line).
  using completer = std::function<std::vector<std::string>(
    const std::string& line_before_cursor)>;

  // `program` names this editor for ~/.editrc; `history_path` is loaded
  // now (created, with its folder, if missing) and rewritten on every
  // add_history so that history survives a killed shell.
  line_editor(std::string program, std::string history_path,
              completer complete);
  ~line_editor();
  line_editor(const line_editor&) = delete;
  line_editor& operator=(const line_editor&) = delete;

  // Shows `prompt` and reads one line, without its newline. false at end of
  // input (Ctrl-D on an empty line) or a read error.
  bool read_line(const std::string& prompt, std::string& out);

  // Appends to the history without trailing blanks (blank lines and repeats
  // of the last entry are skipped), keeps the last 1000 entries, saves the
  // file.
  void add_history(const std::string& line);

  // The last problem reading or writing the history file, "" if none; the
  // editor keeps working without a file.
  const std::string& history_problem() const { return history_problem_; }

private:
  static char* prompt_of(struct editline* el);
  static unsigned char on_tab(struct editline* el, int key);
  unsigned char complete();
  void list_candidates(const std::vector<std::string>& candidates);
  void load_history();
  void save_history();

  std::string program_;
  std::string history_path_;
  completer complete_;
  std::string prompt_;
  std::string history_problem_;
  bool history_writable_ = true;
  // The line and cursor as the last Tab left them: a Tab on an unchanged
  // line is a second Tab, which lists the candidates.
  std::string line_after_tab_;
  long cursor_after_tab_ = -1;
  struct editline* el_ = nullptr;
  struct history* history_ = nullptr;
};

} // namespace tutti::shell
