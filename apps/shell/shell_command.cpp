#include "shell_command.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

namespace tutti::shell {

namespace {

// What a positional argument or option value must look like.
enum class value_kind {
  text,         // metrics NAME: anything
  actor_path,   // completes from the live actor tree
  command_name, // help CMD: must be a known command
  whole_number, // >= 0: layers and nodes
  count,        // >= 1: --lines
  duration,     // --since: 300, 90s, 5m, 2h
  level,        // --level
  flag,         // --follow: no value
  choice,       // one of the arg's choices: rollout ACTION
};

struct arg_spec {
  std::string label; // "LAYER", as in the usage line
  value_kind kind;
  bool required;
  std::vector<std::string> choices = {}; // value_kind::choice
};

struct option_spec {
  std::string name; // without dashes
  value_kind kind;
  bool required = false; // rollback --to-version
};

struct command_spec {
  command_info info;
  std::vector<arg_spec> args;
  std::vector<option_spec> options;
};

const std::vector<std::string> log_levels = {"debug", "info", "warn", "error"};

// The one table: usage strings, validation and completion all come from it.
const std::vector<command_spec>& command_table() {
  static const std::vector<command_spec> table = {
    {{"help", "help [CMD]", "list commands, or show how to use one"},
     {{"CMD", value_kind::command_name, false}},
     {}},
    {{"status", "status", "job state, step, loss, throughput and ETA"}, {}, {}},
    {{"nodes", "nodes", "nodes with their daemons, ranks and health"}, {}, {}},
    {{"actors", "actors [PATH]",
      "the supervision tree, or the subtree under PATH"},
     {{"PATH", value_kind::actor_path, false}},
     {}},
    {{"experts", "experts [LAYER]",
      "expert load and placement, for all layers or one"},
     {{"LAYER", value_kind::whole_number, false}},
     {}},
    {{"metrics", "metrics [NAME]", "latest training metrics, or one metric"},
     {{"NAME", value_kind::text, false}},
     {}},
    {{"events", "events [--since T]",
      "supervision events, e.g. in the last 300 s, 5m or 2h"},
     {},
     {{"since", value_kind::duration}}},
    {{"logs",
      "logs [--node N] [--level debug|info|warn|error] [--follow] [--lines N]",
      "structured log lines, filtered by node and level"},
     {},
     {{"node", value_kind::whole_number},
      {"level", value_kind::level},
      {"follow", value_kind::flag},
      {"lines", value_kind::count}}},
    {{"pause", "pause", "pause training after the current step"}, {}, {}},
    {{"resume", "resume", "resume a paused job"}, {}, {}},
    {{"checkpoint", "checkpoint", "write a checkpoint now"}, {}, {}},
    {{"restart", "restart PATH", "restart the actor at PATH"},
     {{"PATH", value_kind::actor_path, true}},
     {}},
    {{"kill", "kill PATH",
      "kill the actor at PATH (its supervisor decides what follows)"},
     {{"PATH", value_kind::actor_path, true}},
     {}},
    {{"drain", "drain NODE", "move work off a node before taking it down"},
     {{"NODE", value_kind::whole_number, true}},
     {}},
    {{"stop", "stop", "checkpoint and stop the job"}, {}, {}},
    {{"quit", "quit", "leave the shell (the job keeps running)"}, {}, {}},
    {{"exit", "exit", "leave the shell (the job keeps running)"}, {}, {}},
    {{"audit", "audit", "the audit log: operator actions and refusals"},
     {},
     {}},
    {{"config", "config history | config diff V1 V2",
      "the job's config versions: who changed what, when"},
     {{"history|diff", value_kind::text, true},
      {"V1", value_kind::whole_number, false},
      {"V2", value_kind::whole_number, false}},
     {}},
    {{"rollback",
      "rollback [RUN_DIR] --to-version V [--checkpoint STEP] [--prepare-only]",
      "restart a stopped job on config version V from a checkpoint"},
     {{"RUN_DIR", value_kind::text, false}},
     {{"to-version", value_kind::count, true},
      {"checkpoint", value_kind::whole_number},
      {"prepare-only", value_kind::flag},
      {"quiet", value_kind::flag}}},
    {{"rollout",
      "rollout status|events|promote|rollback HOST:PORT [--token-file F]",
      "a gateway's rollout: show it, or steer its canary"},
     {{"ACTION", value_kind::choice, true,
       {"status", "events", "promote", "rollback"}},
      {"HOST:PORT", value_kind::text, true}},
     {{"token-file", value_kind::text}}},
  };
  return table;
}

const command_spec* find_spec(const std::string& name) {
  for (const auto& spec : command_table())
    if (spec.info.name == name)
      return &spec;
  return nullptr;
}

const option_spec* find_option(const command_spec& spec,
                               const std::string& name) {
  for (const auto& opt : spec.options)
    if (opt.name == name)
      return &opt;
  return nullptr;
}

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

std::string trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_space(s[begin]))
    ++begin;
  while (end > begin && is_space(s[end - 1]))
    --end;
  return s.substr(begin, end - begin);
}

std::string lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

struct token {
  std::string text;
  bool quoted = false; // a quoted token is never an option: "--level" is text
};

struct token_list {
  std::vector<token> tokens;
  bool unterminated_quote = false;
  bool ends_in_space = false; // the cursor is past the last token
};

// Whitespace splits; double quotes group, with \" and \\ inside them.
token_list tokenize(const std::string& line) {
  token_list out;
  token current;
  bool in_token = false, in_quotes = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_quotes) {
      if (c == '"') {
        in_quotes = false;
      } else if (c == '\\' && i + 1 < line.size()
                 && (line[i + 1] == '"' || line[i + 1] == '\\')) {
        current.text += line[++i];
      } else {
        current.text += c;
      }
    } else if (c == '"') {
      in_quotes = in_token = current.quoted = true;
    } else if (is_space(c)) {
      if (in_token)
        out.tokens.push_back(current);
      current = {};
      in_token = false;
    } else {
      current.text += c;
      in_token = true;
    }
  }
  if (in_token)
    out.tokens.push_back(current);
  out.unterminated_quote = in_quotes;
  out.ends_in_space = !in_quotes && !line.empty() && is_space(line.back());
  return out;
}

bool is_option_token(const token& t) {
  return !t.quoted && starts_with(t.text, "--");
}

std::optional<long long> parse_whole_number(const std::string& text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) {
        return c >= '0' && c <= '9';
      }))
    return std::nullopt;
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(),
                                   value);
  if (ec != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

std::string join(const std::vector<std::string>& words,
                 const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i ? sep : "") + words[i];
  return out;
}

// The closest of `candidates` to `word` if within 2 edits, else "".
std::string closest(const std::string& word,
                    const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;
  for (const auto& c : candidates) {
    size_t d = edit_distance(lower(word), lower(c));
    if (d < best_distance)
      best_distance = d, best = c;
  }
  return best;
}

std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (const auto& spec : command_table())
    names.push_back(spec.info.name);
  return names;
}

std::string unknown_command_message(const std::string& name) {
  std::string guess = closest(name, command_names());
  return "unknown command '" + name + "' ("
         + (guess.empty() ? "try help" : "did you mean '" + guess + "'?") + ")";
}

// "" when `value` fits `kind`, else what it must be ("a whole number >= 0").
std::string check_value(value_kind kind, const std::string& value) {
  switch (kind) {
  case value_kind::whole_number:
    return parse_whole_number(value) ? "" : "a whole number >= 0";
  case value_kind::count: {
    auto n = parse_whole_number(value);
    return n && *n >= 1 ? "" : "a whole number >= 1";
  }
  case value_kind::duration:
    return duration_seconds(value) ? ""
                                   : "a positive number of seconds ago, or "
                                     "minutes/hours like 5m or 2h";
  case value_kind::level:
    return std::count(log_levels.begin(), log_levels.end(), value)
             ? ""
             : "one of " + join(log_levels, ", ");
  case value_kind::text:
  case value_kind::actor_path:
    return value.empty() ? "non-empty" : "";
  case value_kind::command_name: // checked by the caller, which suggests
  case value_kind::flag:
  case value_kind::choice:        // checked against the arg's choices
    return "";
  }
  return "";
}

// Fills options and positional args from tokens[1..]; "" or the problem.
std::string collect(const command_spec& spec, const std::vector<token>& tokens,
                    parsed_command& out) {
  for (size_t i = 1; i < tokens.size(); ++i) {
    const token& t = tokens[i];
    if (!is_option_token(t)) {
      out.args.push_back(t.text);
      continue;
    }
    std::string name = t.text.substr(2), value;
    size_t eq = name.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value)
      value = name.substr(eq + 1), name.resize(eq);
    const option_spec* opt = find_option(spec, name);
    if (!opt) {
      std::vector<std::string> known;
      for (const auto& o : spec.options)
        known.push_back(o.name);
      std::string guess = closest(name, known);
      return "unknown option '--" + name + "'"
             + (guess.empty() ? "" : " (did you mean '--" + guess + "'?)");
    }
    if (out.options.count(name))
      return "--" + name + " given twice";
    if (opt->kind == value_kind::flag) {
      if (inline_value)
        return "--" + name + " takes no value";
      out.options[name] = "true";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= tokens.size() || is_option_token(tokens[i + 1]))
        return "--" + name + " needs a value";
      value = tokens[++i].text;
    }
    if (std::string want = check_value(opt->kind, value); !want.empty())
      return "--" + name + " must be " + want + ", got '" + value + "'";
    out.options[name] = value;
  }
  return "";
}

std::string check_args(const command_spec& spec, const parsed_command& cmd) {
  if (cmd.args.size() > spec.args.size()) {
    const std::string& extra = cmd.args[spec.args.size()];
    return spec.args.empty() ? "takes no arguments, got '" + extra + "'"
                             : "unexpected argument '" + extra + "'";
  }
  for (size_t i = 0; i < spec.args.size(); ++i) {
    const arg_spec& arg = spec.args[i];
    if (i >= cmd.args.size()) {
      if (arg.required)
        return "missing " + arg.label;
      continue;
    }
    if (std::string want = check_value(arg.kind, cmd.args[i]); !want.empty())
      return arg.label + " must be " + want + ", got '" + cmd.args[i] + "'";
    if (arg.kind == value_kind::choice
        && !std::count(arg.choices.begin(), arg.choices.end(), cmd.args[i])) {
      std::string guess = closest(cmd.args[i], arg.choices);
      return arg.label + " must be one of " + join(arg.choices, ", ")
             + ", got '" + cmd.args[i] + "'"
             + (guess.empty() ? "" : " (did you mean '" + guess + "'?)");
    }
  }
  for (const auto& opt : spec.options)
    if (opt.required && !cmd.options.count(opt.name))
      return "missing --" + opt.name;
  return "";
}

std::vector<std::string> with_prefix(const std::vector<std::string>& words,
                                     const std::string& prefix) {
  std::set<std::string> unique;
  for (const auto& w : words)
    if (starts_with(w, prefix))
      unique.insert(w);
  return {unique.begin(), unique.end()};
}

// The text after the last ';' outside quotes: the command being typed.
std::string last_command(const std::string& text) {
  bool in_quotes = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (in_quotes && text[i] == '\\' && i + 1 < text.size())
      ++i;
    else if (text[i] == '"')
      in_quotes = !in_quotes;
    else if (text[i] == ';' && !in_quotes)
      start = i + 1;
  }
  return text.substr(start);
}

} // namespace

const std::vector<command_info>& shell_commands() {
  static const std::vector<command_info> infos = [] {
    std::vector<command_info> out;
    for (const auto& spec : command_table())
      out.push_back(spec.info);
    return out;
  }();
  return infos;
}

const command_info* find_command(const std::string& name) {
  const command_spec* spec = find_spec(name);
  return spec ? &spec->info : nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> split_commands(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  bool in_quotes = false;
  auto flush = [&] {
    if (std::string t = trim(current); !t.empty())
      out.push_back(t);
    current.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ';' && !in_quotes) {
      flush();
      continue;
    }
    current += c;
    if (in_quotes && c == '\\' && i + 1 < text.size())
      current += text[++i]; // keep \" inside quotes
    else if (c == '"')
      in_quotes = !in_quotes;
  }
  flush();
  return out;
}

std::optional<double> duration_seconds(const std::string& text) {
  // Strict: digits, optional fraction, optional unit; no signs, exponents, inf.
  size_t i = 0, digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
    ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    size_t fraction = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
      ++i, ++fraction;
    if (fraction == 0)
      return std::nullopt;
  }
  if (digits == 0)
    return std::nullopt;
  double scale = 1;
  if (i + 1 == text.size()) {
    switch (text[i]) {
    case 's':
      scale = 1;
      break;
    case 'm':
      scale = 60;
      break;
    case 'h':
      scale = 3600;
      break;
    default:
      return std::nullopt;
    }
  } else if (i != text.size()) {
    return std::nullopt;
  }
  double number = 0; // from_chars: no locale, unlike strtod
  std::from_chars(text.data(), text.data() + i, number);
  double seconds = number * scale;
  if (!(seconds > 0) || !std::isfinite(seconds))
    return std::nullopt;
  return seconds;
}

parsed_command parse_command(const std::string& line, std::string& error) {
  error.clear();
  token_list lexed = tokenize(line);
  if (lexed.unterminated_quote) {
    error = "missing closing quote (\") in: " + trim(line);
    return {};
  }
  if (lexed.tokens.empty())
    return {};
  const std::string& name = lexed.tokens[0].text;
  const command_spec* spec = find_spec(name);
  if (!spec) {
    error = unknown_command_message(name);
    return {};
  }
  parsed_command cmd;
  cmd.name = name;
  std::string problem = collect(*spec, lexed.tokens, cmd);
  if (problem.empty())
    problem = check_args(*spec, cmd);
  if (problem.empty() && name == "help" && !cmd.args.empty()
      && !find_spec(cmd.args[0]))
    problem = unknown_command_message(cmd.args[0]);
  if (!problem.empty()) {
    error = name + ": " + problem + " (usage: " + spec->info.usage + ")";
    return {};
  }
  return cmd;
}

std::vector<std::string> complete_command_line(
  const std::string& before_cursor,
  const std::vector<std::string>& actor_paths) {
  token_list lexed = tokenize(last_command(before_cursor));
  // Inside quotes the word boundaries are the user's business.
  if (lexed.unterminated_quote)
    return {};
  std::vector<token>& tokens = lexed.tokens;
  bool new_word = tokens.empty() || lexed.ends_in_space;
  if (!new_word && tokens.back().quoted)
    return {};
  std::string partial = new_word ? "" : tokens.back().text;
  size_t word_index = new_word ? tokens.size() : tokens.size() - 1;
  if (word_index == 0)
    return with_prefix(command_names(), partial);

  const command_spec* spec = find_spec(tokens[0].text);
  if (!spec)
    return {};

  // The word after an option that takes a value is that value.
  const token& previous = tokens[word_index - 1];
  if (word_index >= 2 && is_option_token(previous)) {
    const option_spec* opt = find_option(*spec, previous.text.substr(2));
    if (opt && opt->kind != value_kind::flag)
      return opt->kind == value_kind::level ? with_prefix(log_levels, partial)
                                            : std::vector<std::string>{};
  }

  // Which positional argument this word is, and which options are used.
  size_t positional = 0;
  std::set<std::string> used;
  for (size_t i = 1; i < word_index; ++i) {
    if (!is_option_token(tokens[i])) {
      ++positional;
      continue;
    }
    std::string name = tokens[i].text.substr(2);
    used.insert(name.substr(0, name.find('=')));
    const option_spec* opt = find_option(*spec, name);
    if (opt && opt->kind != value_kind::flag)
      ++i; // skip its value
  }

  // `--level=w` completes as one word.
  if (starts_with(partial, "--level=") && find_option(*spec, "level")) {
    std::vector<std::string> forms;
    for (const auto& level : log_levels)
      forms.push_back("--level=" + level);
    return with_prefix(forms, partial);
  }

  bool wants_option = starts_with(partial, "-")
                      || (partial.empty() && positional >= spec->args.size());
  if (wants_option) {
    std::vector<std::string> names;
    for (const auto& opt : spec->options)
      if (!used.count(opt.name))
        names.push_back("--" + opt.name);
    return with_prefix(names, partial);
  }
  if (positional >= spec->args.size())
    return {};
  switch (spec->args[positional].kind) {
  case value_kind::actor_path:
    return with_prefix(actor_paths, partial);
  case value_kind::command_name:
    return with_prefix(command_names(), partial);
  case value_kind::choice:
    return with_prefix(spec->args[positional].choices, partial);
  default:
    return {};
  }
}

} // namespace tutti::shell
