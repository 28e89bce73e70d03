// The node's InfiniBand ports as the kernel shows them in sysfs, read without any
// library: one LinkSample per /sys/class/infiniband/<device>/ports/<port>. RoCE ports
// (Ethernet link layer) appear there in the same shape and are read the same way.
// NVLinks come from NVML instead (nvml.h). KeepLinksSeenUp is the filter both real
// backends put their links through, so that unused ports do not read as down.
//
// `errors` is the sum of the port's hardware error counters, which count from the
// driver's load or the last counter reset, not from the agent's start: the server
// reads link.errors as a counter (increases between heartbeats; a drop is a restart),
// so only their growth matters. The InfiniBand counters are narrow and saturate
// (symbol_error at 65535, link_downed at 255): a saturated counter stops growing.
//
// Thread-safety: plain functions, callable from any thread; a `seen_up` set is its
// caller's to guard.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu.h"

namespace trainyard::agent {

inline constexpr char kInfinibandSysfsRoot[] = "/sys/class/infiniband";

// A heartbeat carries at most 256 links (the server refuses more); InfiniBand ports
// and NVLinks each get a share of that.
inline constexpr size_t kMaxInfinibandLinks = 64;
inline constexpr size_t kMaxNvLinks = 192;

// The ports under `root` (a directory laid out like /sys/class/infiniband), named
// "<device>/<port>" ("mlx5_0/1"), kind "ib", in device then port order, at most
// kMaxInfinibandLinks. A port is up iff its `state` is 4 (ACTIVE) and its
// `phys_state`, where it reads as a number, is 5 (LinkUp); a state that cannot be
// read or parsed counts as down. `errors` sums the counters/ files symbol_error,
// link_error_recovery, link_downed, port_rcv_errors, port_xmit_discards,
// local_link_integrity_errors and excessive_buffer_overrun_errors; a missing or
// unreadable one counts 0. A root that is absent or unreadable yields no links,
// never an error.
std::vector<LinkSample> ReadInfinibandLinks(const std::string& root = kInfinibandSysfsRoot);

// The links of `links` that are up now or were up in an earlier call with the same
// `seen_up` (the names seen up so far, which it updates). A link never seen up is taken
// for a port with nothing plugged in (the second port of a dual-port HCA, the NVLinks
// of a PCIe GPU without a bridge) and left out, so that it does not read as a link down
// for ever; once seen up, a link is reported down when it goes down. The price: a link
// already broken when the agent starts is not reported. Order is kept.
std::vector<LinkSample> KeepLinksSeenUp(std::vector<LinkSample> links,
                                        std::set<std::string>& seen_up);

}  // namespace trainyard::agent
