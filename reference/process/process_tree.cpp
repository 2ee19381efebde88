#include "process/process_tree.h"

#include <dirent.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace tripod::process {
namespace {

struct StatFields {
  char state = '?';
  pid_t parent = -1, group = -1;
};

// /proc/PID/stat's state, parent and group: the fields after the command name, which may hold
// spaces and parentheses itself, so read after its last ')'.
bool read_stat(pid_t pid, StatFields& out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  return static_cast<bool>(rest >> out.state >> out.parent >> out.group);
}

}  // namespace

std::vector<pid_t> live_descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // parent -> child
  std::map<pid_t, char> state;
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* entry = ::readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(entry->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      StatFields f;
      if (!read_stat(static_cast<pid_t>(pid), f)) continue;
      children.emplace(f.parent, static_cast<pid_t>(pid));
      state[static_cast<pid_t>(pid)] = f.state;
    }
    ::closedir(proc);
  }
  std::vector<pid_t> found, frontier{root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    const auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      frontier.push_back(it->second);
      if (state[it->second] != 'Z' && state[it->second] != 'X') found.push_back(it->second);
    }
  }
  return found;
}

pid_t process_group(pid_t pid) {
  StatFields f;
  return read_stat(pid, f) ? f.group : -1;
}

}  // namespace tripod::process
