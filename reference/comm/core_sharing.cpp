#include "comm/core_sharing.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cstdlib>
#include <set>
#include <sstream>

#include "comm/host_collectives.h"
#include "core/error.h"

namespace tripod {
namespace {

// "host|0,1,5" -> ("host", {0, 1, 5})
std::pair<std::string, std::set<int>> parse(const std::string& text) {
  const std::size_t bar = text.rfind('|');
  check(bar != std::string::npos, "core sharing: malformed CPU list '", text, "'");
  std::set<int> cpus;
  std::stringstream list(text.substr(bar + 1));
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) cpus.insert(std::stoi(item));
  return {text.substr(0, bar), cpus};
}

std::optional<CoreShare> last_share;

}  // namespace

std::optional<CoreShare> process_core_share() { return last_share; }

int threads_per_rank(int own_cpus, int machine_cpus, int local_ranks) {
  return std::max(1, std::min(own_cpus, machine_cpus / std::max(1, local_ranks)));
}

CoreShare core_share_of(const std::string& mine, const std::vector<std::string>& all) {
  const auto [host, own] = parse(mine);
  std::set<int> machine;
  CoreShare share;
  share.local_ranks = 0;
  for (const std::string& text : all) {
    const auto [other_host, cpus] = parse(text);
    if (other_host != host) continue;
    ++share.local_ranks;
    machine.insert(cpus.begin(), cpus.end());
  }
  share.local_ranks = std::max(1, share.local_ranks);
  share.own_cpus = std::max<int>(1, static_cast<int>(own.size()));
  share.machine_cpus = std::max<int>(1, static_cast<int>(machine.size()));
  share.threads = threads_per_rank(share.own_cpus, share.machine_cpus, share.local_ranks);
  return share;
}

std::string core_share_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  std::string text = std::string(host) + "|";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) text += std::to_string(cpu) + ",";
  } else {
    text += "0,";  // unknown: count one
  }
  return text;
}

CoreShare share_cores(Communicator& world) {
  const std::string mine = core_share_text();
  // Only the ranks of one machine exchange their CPU lists (a hash collision between host names
  // only adds texts that core_share_of leaves out). A list is at most CPU_SETSIZE numbers of up to
  // 4 digits with their commas.
  const std::string host = mine.substr(0, mine.rfind('|'));
  const auto machine = world.split(static_cast<int>(std::hash<std::string>{}(host) & 0x7fffffff), world.rank(),
                                   "ranks of " + host);
  CoreShare share = core_share_of(mine, all_gather_text(*machine, mine, 256 + 5 * CPU_SETSIZE));
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    share.from_env = true;
    share.threads = omp_get_max_threads();
  } else {
    omp_set_num_threads(share.threads);
  }
  last_share = share;
  return share;
}

std::string describe(const CoreShare& share) {
  std::ostringstream out;
  out << share.local_ranks << (share.local_ranks == 1 ? " rank" : " ranks") << " on this machine, "
      << share.machine_cpus << " CPUs between them, " << share.own_cpus << " for this rank: " << share.threads
      << (share.threads == 1 ? " thread" : " threads") << " per rank"
      << (share.from_env ? " (OMP_NUM_THREADS)" : "");
  // Only OMP_NUM_THREADS can ask for more: the threads then take turns on the rank's CPUs. The
  // usual cause is the launcher's binding (Open MPI binds each of 2 or fewer ranks to one core).
  if (share.threads > share.own_cpus)
    out << "; WARNING: more threads than the " << share.own_cpus << (share.own_cpus == 1 ? " CPU" : " CPUs")
        << " this rank may run on, so they take turns (the launcher bound the rank: mpirun --bind-to none, or "
           "--map-by slot:PE=" << share.threads << ")";
  return out.str();
}

}  // namespace tripod
