#include "rsched/trace/perfetto.hpp"

#include "pb.hpp"

#include <algorithm>
#include <map>

namespace rsched::trace {

namespace {

error bad(std::string_view what) {
  return make_error("not a trace rsched can read: " + std::string(what));
}

comm_t comm_of(std::string_view s) {
  comm_t c{};
  for (std::size_t i = 0; i < s.size() && i + 1 < c.size(); ++i) {
    c[i] = s[i];
  }
  return c;
}

// A packed repeated varint field's values, appended.
bool unpack(std::string_view bytes, std::vector<std::uint64_t> &out) {
  pb::reader r(bytes);
  while (!r.at_end()) {
    auto v = r.varint();
    if (!v) {
      return false;
    }
    out.push_back(*v);
  }
  return true;
}

std::int32_t i32(std::uint64_t v) {
  return static_cast<std::int32_t>(static_cast<std::int64_t>(v));
}

struct compact_arrays {
  std::vector<std::string_view> intern;
  std::map<std::uint32_t, std::vector<std::uint64_t>> a;
};

result<void> read_compact(std::string_view bytes, compact_arrays &c) {
  pb::reader r(bytes);
  while (auto fl = r.next()) {
    if (fl->wire != pb::wire_len) {
      continue;
    }
    if (fl->number == 5) {
      c.intern.push_back(fl->bytes);
    } else if (!unpack(fl->bytes, c.a[fl->number])) {
      return bad("a packed array is truncated");
    }
  }
  if (!r.ok()) {
    return bad("compact_sched is truncated");
  }
  return {};
}

result<void> read_event(std::string_view bytes, std::uint32_t cpu, std::vector<sched_event> &out) {
  sched_event e;
  e.cpu = cpu;
  std::string_view body;
  std::uint32_t which = 0;
  pb::reader r(bytes);
  while (auto fl = r.next()) {
    if (fl->number == 1 && fl->wire == pb::wire_varint) {
      e.ts = fl->value;
    } else if (fl->number == 2 && fl->wire == pb::wire_varint) {
      e.pid = i32(fl->value);
    } else if (fl->wire == pb::wire_len) {
      which = fl->number;
      body = fl->bytes;
    }
  }
  if (!r.ok()) {
    return bad("an ftrace event is truncated");
  }
  switch (which) {
  case 114:
    e.kind = event_kind::sched_wakeup_new;
    break;
  case 491:
    e.kind = event_kind::sched_migrate_task;
    break;
  case 239:
    e.kind = event_kind::sched_process_fork;
    break;
  case 238:
    e.kind = event_kind::sched_process_exit;
    break;
  case 236:
    e.kind = event_kind::task_rename;
    break;
  default:
    return {}; // an event this subset does not hold
  }
  pb::reader b(body);
  while (auto fl = b.next()) {
    const std::uint32_t n = fl->number;
    const std::int32_t v = i32(fl->value);
    switch (e.kind) {
    case event_kind::sched_wakeup_new:
    case event_kind::sched_migrate_task:
      if (n == 1) {
        e.comm = comm_of(fl->bytes);
      } else if (n == 2) {
        e.tid = v;
      } else if (n == 3) {
        e.prio = v;
      } else if (n == 4 && e.kind == event_kind::sched_migrate_task) {
        e.orig_cpu = v;
      } else if (n == 5) {
        e.target_cpu = v;
      }
      break;
    case event_kind::sched_process_fork:
      if (n == 1) {
        e.comm2 = comm_of(fl->bytes);
      } else if (n == 3) {
        e.comm = comm_of(fl->bytes);
      } else if (n == 4) {
        e.tid = v;
      }
      break;
    case event_kind::sched_process_exit:
      if (n == 1) {
        e.comm = comm_of(fl->bytes);
      } else if (n == 2) {
        e.tid = v;
      } else if (n == 3) {
        e.tgid = v;
      } else if (n == 4) {
        e.prio = v;
      }
      break;
    case event_kind::task_rename:
      if (n == 1) {
        e.tid = v;
      } else if (n == 2) {
        e.comm2 = comm_of(fl->bytes);
      } else if (n == 3) {
        e.comm = comm_of(fl->bytes);
      }
      break;
    case event_kind::sched_switch:
    case event_kind::sched_waking:
      break;
    }
  }
  if (!b.ok()) {
    return bad("an ftrace event's body is truncated");
  }
  out.push_back(e);
  return {};
}

// A ClockSnapshot's BOOTTIME (6), MONOTONIC (3) and REALTIME (1) readings.
result<clock_snapshot> read_clocks(std::string_view bytes) {
  clock_snapshot c;
  pb::reader snap(bytes);
  while (auto sf = snap.next()) {
    if (sf->number != 1 || sf->wire != pb::wire_len) {
      continue;
    }
    std::uint64_t id = 0;
    std::uint64_t ts = 0;
    pb::reader one(sf->bytes);
    while (auto x = one.next()) {
      if (x->number == 1 && x->wire == pb::wire_varint) {
        id = x->value;
      } else if (x->number == 2 && x->wire == pb::wire_varint) {
        ts = x->value;
      }
    }
    if (!one.ok()) {
      return bad("a clock of the clock snapshot is truncated");
    }
    if (id == 6) {
      c.boottime_ns = ts;
    } else if (id == 3) {
      c.monotonic_ns = ts;
    } else if (id == 1) {
      c.realtime_ns = ts;
    }
  }
  if (!snap.ok()) {
    return bad("the clock snapshot is truncated");
  }
  return c;
}

} // namespace

result<decoded_trace> decode(std::string_view bytes) {
  decoded_trace d;
  std::map<std::uint32_t, std::int32_t> running; // per CPU: the last switch's next tid
  pb::reader trace(bytes);
  while (auto pf = trace.next()) {
    if (pf->number != 1 || pf->wire != pb::wire_len) {
      continue;
    }
    ++d.packets;
    pb::reader packet(pf->bytes);
    while (auto fl = packet.next()) {
      if (fl->wire != pb::wire_len) {
        continue;
      }
      if (fl->number == 6) { // clock_snapshot
        auto c = read_clocks(fl->bytes);
        if (!c) {
          return c.err();
        }
        if (!d.clocks) {
          d.clocks = *c;
        }
      } else if (fl->number == 2) { // process_tree
        pb::reader tree(fl->bytes);
        while (auto tf = tree.next()) {
          if (tf->number != 2 || tf->wire != pb::wire_len) {
            continue;
          }
          thread_name t;
          pb::reader th(tf->bytes);
          while (auto x = th.next()) {
            if (x->number == 1) {
              t.tid = i32(x->value);
            } else if (x->number == 3) {
              t.tgid = i32(x->value);
            } else if (x->number == 2) {
              t.comm = comm_of(x->bytes);
            }
          }
          if (!th.ok()) {
            return bad("a thread of the process tree is truncated");
          }
          d.threads.push_back(t);
        }
        if (!tree.ok()) {
          return bad("the process tree is truncated");
        }
      } else if (fl->number == 1) { // ftrace_events
        std::uint32_t cpu = 0;
        std::vector<std::string_view> events;
        std::string_view compact_bytes;
        bool lost = false;
        pb::reader bundle(fl->bytes);
        while (auto bf = bundle.next()) {
          if (bf->number == 1 && bf->wire == pb::wire_varint) {
            cpu = static_cast<std::uint32_t>(bf->value);
          } else if (bf->number == 3 && bf->wire == pb::wire_varint) {
            lost = bf->value != 0;
          } else if (bf->number == 2 && bf->wire == pb::wire_len) {
            events.push_back(bf->bytes);
          } else if (bf->number == 4 && bf->wire == pb::wire_len) {
            compact_bytes = bf->bytes;
          }
        }
        if (!bundle.ok()) {
          return bad("an event bundle is truncated");
        }
        if (lost) {
          d.lossy_cpus.push_back(cpu);
        }
        const std::size_t first = d.events.size();
        for (auto ev : events) {
          if (auto r = read_event(ev, cpu, d.events); !r) {
            return r.err();
          }
        }
        compact_arrays c;
        if (auto r = read_compact(compact_bytes, c); !r) {
          return r.err();
        }
        auto &a = c.a;
        const auto comm_at = [&](std::uint64_t i) {
          return i < c.intern.size() ? comm_of(c.intern[i]) : comm_t{};
        };
        const std::size_t nsw = a[1].size();
        if (a[2].size() != nsw || a[3].size() != nsw || a[4].size() != nsw || a[6].size() != nsw) {
          return bad("compact sched_switch arrays of different lengths");
        }
        const std::size_t nwk = a[7].size();
        if (a[8].size() != nwk || a[9].size() != nwk || a[10].size() != nwk ||
            a[11].size() != nwk) {
          return bad("compact sched_waking arrays of different lengths");
        }
        std::vector<sched_event> compact_events;
        std::uint64_t ts = 0;
        for (std::size_t i = 0; i < nsw; ++i) {
          sched_event e;
          e.kind = event_kind::sched_switch;
          e.cpu = cpu;
          ts += a[1][i];
          e.ts = ts;
          e.prev_state = static_cast<std::int64_t>(a[2][i]);
          e.tid = i32(a[3][i]);
          e.prio = i32(a[4][i]);
          e.comm = comm_at(a[6][i]);
          compact_events.push_back(e);
        }
        ts = 0;
        for (std::size_t i = 0; i < nwk; ++i) {
          sched_event e;
          e.kind = event_kind::sched_waking;
          e.cpu = cpu;
          ts += a[7][i];
          e.ts = ts;
          e.tid = i32(a[8][i]);
          e.target_cpu = i32(a[9][i]);
          e.prio = i32(a[10][i]);
          e.comm = comm_at(a[11][i]);
          compact_events.push_back(e);
        }
        d.events.insert(d.events.end(), compact_events.begin(), compact_events.end());
        // The bundle's events in time order (stable: a switch before a waking of the same ns,
        // as they were kept), then the prev tid of each switch and the waker of each waking
        // from the thread running on the CPU.
        std::stable_sort(d.events.begin() + static_cast<std::ptrdiff_t>(first), d.events.end(),
                         [](const sched_event &x, const sched_event &y) { return x.ts < y.ts; });
        for (auto it = d.events.begin() + static_cast<std::ptrdiff_t>(first); it != d.events.end();
             ++it) {
          if (it->kind == event_kind::sched_switch) {
            it->pid = running[cpu];
            running[cpu] = it->tid;
          } else if (it->kind == event_kind::sched_waking) {
            it->pid = running[cpu];
          }
        }
      }
    }
    if (!packet.ok()) {
      return bad("a packet is truncated");
    }
  }
  if (!trace.ok()) {
    return bad("the trace is truncated");
  }
  return d;
}

} // namespace rsched::trace
