#include "agent/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/spec_paths.h"

namespace trainyard::agent {
namespace {

constexpr int64_t kCpuPeriodUs = 100'000;

std::string Errno(int e) { return std::strerror(e); }

bool ReadText(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

// Writes `value` with one write(2), as cgroup files want; the kernel's answer as error.
Status WriteValue(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return FailedPrecondition(path + ": " + Errno(errno));
  ssize_t n = write(fd, value.data(), value.size());
  const int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return FailedPrecondition("writing \"" + value + "\" to " + path + ": " + Errno(e));
  }
  return Status::Ok();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::Ok();
  return FailedPrecondition("mkdir " + path + ": " + Errno(errno));
}

std::vector<std::string> Split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream in{std::string(text)};
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.size() == 3 && oct.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(oct, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

struct Mount {
  std::string root;               // the part of the hierarchy mounted
  std::string point;              // where
  std::string fstype;             // cgroup or cgroup2
  std::set<std::string> options;  // super options: v1 controllers among them
};

std::vector<Mount> CgroupMounts(const std::string& mountinfo) {
  std::vector<Mount> out;
  for (const std::string& line : Split(mountinfo, '\n')) {
    std::vector<std::string> f = Words(line);
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 6 || dash + 1 >= f.size()) continue;
    Mount m;
    m.root = Unescape(f[3]);
    m.point = Unescape(f[4]);
    m.fstype = f[dash + 1];
    if (m.fstype != "cgroup" && m.fstype != "cgroup2") continue;
    if (dash + 3 < f.size()) {
      for (const std::string& o : Split(f[dash + 3], ',')) m.options.insert(o);
    }
    out.push_back(std::move(m));
  }
  return out;
}

// "/proc/self/cgroup" entries: controllers ("" for v2) -> path.
std::vector<std::pair<std::set<std::string>, std::string>> OwnGroups(const std::string& text) {
  std::vector<std::pair<std::set<std::string>, std::string>> out;
  for (const std::string& line : Split(text, '\n')) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::set<std::string> controllers;
    for (const std::string& c : Split(std::string_view(line).substr(a + 1, b - a - 1), ',')) {
      if (!c.empty()) controllers.insert(c);
    }
    out.emplace_back(std::move(controllers), line.substr(b + 1));
  }
  return out;
}

// Where the process's group `path` lies under a mount of `root` at `point`.
std::string Under(const Mount& m, const std::string& path) {
  std::string rel = path;
  if (m.root != "/" && PathWithin(path, m.root)) rel = path.substr(m.root.size());
  return NormalizePath(m.point + "/" + rel);
}

// `dir` less the mount point it lies under ("/" for the mount point itself).
std::string RelativeTo(const std::string& dir, const std::string& point) {
  const std::string p = NormalizePath(point);
  std::string rel = PathWithin(dir, p) ? dir.substr(p == "/" ? 0 : p.size()) : "";
  return rel.empty() ? "/" : rel;
}

bool ValidGroupName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) {
      return false;
    }
  }
  return true;
}

int64_t OomKillsIn(const std::string& file) {
  std::string text;
  if (!ReadText(file, text)) return 0;
  std::vector<std::string> w = Words(text);
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    if (w[i] == "oom_kill") return std::strtoll(w[i + 1].c_str(), nullptr, 10);
  }
  return 0;
}

std::vector<pid_t> Pids(const std::string& procs_file) {
  std::string text;
  std::vector<pid_t> out;
  if (!ReadText(procs_file, text)) return out;
  for (const std::string& w : Words(text)) out.push_back(static_cast<pid_t>(std::stol(w)));
  return out;
}

}  // namespace

CgroupHost CgroupHost::FromProc() {
  CgroupHost h;
  ReadText("/proc/self/cgroup", h.proc_self_cgroup);
  ReadText("/proc/self/mountinfo", h.mountinfo);
  return h;
}

std::vector<std::string> TaskGroup::ProcsFiles() const {
  std::vector<std::string> out;
  for (const std::string& d : dirs_) out.push_back(d + "/cgroup.procs");
  return out;
}

int64_t TaskGroup::OomKills() const {
  int64_t n = 0;
  for (const std::string& d : dirs_) {
    n += OomKillsIn(d + (version_ == 2 ? "/memory.events" : "/memory.oom_control"));
  }
  return n;
}

void TaskGroup::KillAll() const {
  if (version_ == 2 && dirs_.size() == 1 && Exists(dirs_[0] + "/cgroup.kill")) {
    if (WriteValue(dirs_[0] + "/cgroup.kill", "1").ok()) return;
  }
  // Without cgroup.kill a process may fork while we read: a few rounds.
  for (int round = 0; round < 8; ++round) {
    bool any = false;
    for (const std::string& f : ProcsFiles()) {
      for (pid_t p : Pids(f)) {
        if (p > 0) {
          kill(p, SIGKILL);
          any = true;
        }
      }
    }
    if (!any) return;
  }
}

bool TaskGroup::Empty() const {
  for (const std::string& f : ProcsFiles()) {
    if (!Pids(f).empty()) return false;
  }
  return true;
}

Status TaskGroup::Remove() const {
  for (const std::string& d : dirs_) {
    if (rmdir(d.c_str()) != 0 && errno != ENOENT) {
      return FailedPrecondition("rmdir " + d + ": " + Errno(errno));
    }
  }
  return Status::Ok();
}

Cgroups Cgroups::Disabled(std::string why) {
  Cgroups c;
  c.problem_ = std::move(why);
  return c;
}

Cgroups Cgroups::Detect(const CgroupHost& host) {
  const std::vector<Mount> mounts = CgroupMounts(host.mountinfo);
  const auto own = OwnGroups(host.proc_self_cgroup);
  std::string v2_problem;

  // cgroup v2: the agent's own group, with cpu and memory among its controllers.
  const Mount* v2 = nullptr;
  for (const Mount& m : mounts) {
    if (m.fstype == "cgroup2") {
      v2 = &m;
      break;
    }
  }
  std::string v2_path;
  for (const auto& [controllers, path] : own) {
    if (controllers.empty()) v2_path = path;
  }
  if (v2 == nullptr) {
    v2_problem = "no cgroup v2 mount";
  } else if (v2_path.empty()) {
    v2_problem = "no cgroup v2 entry in /proc/self/cgroup";
  } else {
    const std::string base = Under(*v2, v2_path);
    std::string text;
    ReadText(base + "/cgroup.controllers", text);
    std::set<std::string> offered;
    for (const std::string& w : Words(text)) offered.insert(w);
    if (offered.count("cpu") == 0 || offered.count("memory") == 0) {
      v2_problem = "cgroup v2 at " + base + " offers " +
                   (offered.empty() ? std::string("no controllers") : "only " + text) +
                   " (cpu and memory are needed)";
      while (!v2_problem.empty() && (v2_problem.back() == '\n')) v2_problem.pop_back();
    } else {
      // A group with children may hold no processes (but the root): the agent moves
      // itself into a leaf, then lets its children have the controllers.
      Status s = Status::Ok();
      const bool root = base == NormalizePath(v2->point);
      if (!root) {
        s = MakeDir(base + "/agent");
        if (s.ok()) s = WriteValue(base + "/agent/cgroup.procs", "0");
      }
      if (s.ok()) {
        std::string enable;
        for (const char* c : {"cpu", "memory", "pids"}) {
          if (offered.count(c) > 0) enable += std::string(enable.empty() ? "+" : " +") + c;
        }
        s = WriteValue(base + "/cgroup.subtree_control", enable);
      }
      if (s.ok()) {
        Cgroups c;
        c.version_ = 2;
        c.bases_ = {base};
        c.runtime_base_ = RelativeTo(base, v2->point);
        c.mount_points_ = {NormalizePath(v2->point)};
        return c;
      }
      v2_problem = "cgroup v2 at " + base + " is not delegated to this agent: " + s.message();
    }
  }

  // cgroup v1: a writable hierarchy for each of cpu and memory (pids when there is one).
  std::vector<std::string> bases;
  std::string memory_relative;  // the memory base less its mount point
  std::string v1_problem;
  for (const char* controller : {"cpu", "memory", "pids"}) {
    const Mount* mount = nullptr;
    for (const Mount& m : mounts) {
      if (m.fstype == "cgroup" && m.options.count(controller) > 0) {
        mount = &m;
        break;
      }
    }
    std::string path;
    for (const auto& [controllers, p] : own) {
      if (controllers.count(controller) > 0) path = p;
    }
    const bool needed = std::string_view(controller) != "pids";
    if (mount == nullptr || path.empty()) {
      if (needed) {
        v1_problem = std::string("no cgroup v1 ") + controller + " hierarchy";
        break;
      }
      continue;
    }
    const std::string base = Under(*mount, path) + "/trainyard";
    if (Status s = MakeDir(base); !s.ok()) {
      if (needed) {
        v1_problem = "cgroup v1 " + std::string(controller) + " is not writable: " + s.message();
        break;
      }
      continue;
    }
    bases.push_back(base);
    if (std::string_view(controller) == "memory") memory_relative = RelativeTo(base, mount->point);
  }
  if (v1_problem.empty()) {
    Cgroups c;
    c.version_ = 1;
    c.bases_ = std::move(bases);
    c.runtime_base_ = memory_relative;
    for (const Mount& m : mounts) c.mount_points_.push_back(NormalizePath(m.point));
    return c;
  }
  return Disabled(v2_problem + "; " + v1_problem);
}

std::vector<std::string> Cgroups::List() const {
  std::vector<std::string> out;
  if (bases_.empty()) return out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(bases_[0], ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && ValidGroupName(name) && !(version_ == 2 && name == "agent")) {
      out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TaskGroup Cgroups::Open(const std::string& name) const {
  std::vector<std::string> dirs;
  for (const std::string& base : bases_) dirs.push_back(base + "/" + name);
  return TaskGroup(version_, std::move(dirs), GroupLimits{});
}

std::string Cgroups::Describe() const {
  if (!available()) return "no cgroup limits: " + problem_;
  std::string out = "cgroup v" + std::to_string(version_) + " at ";
  for (size_t i = 0; i < bases_.size(); ++i) out += (i ? ", " : "") + bases_[i];
  return out;
}

Result<TaskGroup> Cgroups::Create(const std::string& name, const GroupLimits& limits) const {
  if (!available()) return FailedPrecondition("no cgroup limits on this node: " + problem_);
  if (!ValidGroupName(name)) {
    return InvalidArgument("cgroup name \"" + name +
                           "\": letters, digits, '.', '-' and '_' only, not starting with '.'");
  }
  std::vector<std::string> dirs;
  auto undo = [&dirs] {
    for (const std::string& d : dirs) rmdir(d.c_str());
  };
  Status s = Status::Ok();
  for (const std::string& base : bases_) {
    const std::string dir = base + "/" + name;
    if (s = MakeDir(dir); !s.ok()) break;
    dirs.push_back(dir);
    auto set = [&](const std::string& file, const std::string& value) {
      if (s.ok() && Exists(dir + "/" + file)) s = WriteValue(dir + "/" + file, value);
    };
    if (version_ == 2) {
      set("cpu.max",
          (limits.milli_cpus > 0 ? std::to_string(limits.milli_cpus * kCpuPeriodUs / 1000)
                                 : std::string("max")) +
              " " + std::to_string(kCpuPeriodUs));
      set("memory.max",
          limits.memory_bytes > 0 ? std::to_string(limits.memory_bytes) : std::string("max"));
      // The limit is the memory a replica may use, not memory plus swap.
      set("memory.swap.max", limits.memory_bytes > 0 ? "0" : "max");
      // One rank out of memory ends its replica's ranks together, as its gang will.
      set("memory.oom.group", "1");
      set("pids.max", limits.pids > 0 ? std::to_string(limits.pids) : std::string("max"));
    } else {
      set("cpu.cfs_period_us", std::to_string(kCpuPeriodUs));
      set("cpu.cfs_quota_us", limits.milli_cpus > 0
                                  ? std::to_string(limits.milli_cpus * kCpuPeriodUs / 1000)
                                  : std::string("-1"));
      set("memory.limit_in_bytes",
          limits.memory_bytes > 0 ? std::to_string(limits.memory_bytes) : std::string("-1"));
      set("pids.max", limits.pids > 0 ? std::to_string(limits.pids) : std::string("max"));
    }
    if (!s.ok()) break;
  }
  if (!s.ok()) {
    undo();
    return s;
  }
  return TaskGroup(version_, std::move(dirs), limits);
}

std::string Cgroups::RuntimePath(const std::string& name, const std::string& child) const {
  if (!available() || runtime_base_.empty()) return "";
  return NormalizePath(runtime_base_ + "/" + name + "/" + child);
}

std::vector<std::string> Cgroups::RuntimeDirs(const std::string& name) const {
  std::vector<std::string> dirs;
  if (!available() || runtime_base_.empty()) return dirs;
  for (const std::string& point : mount_points_) {
    dirs.push_back(NormalizePath(point + "/" + runtime_base_ + "/" + name));
  }
  return dirs;
}

}  // namespace trainyard::agent
