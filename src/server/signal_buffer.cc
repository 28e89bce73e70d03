#include "server/signal_buffer.h"

#include <algorithm>

namespace trainyard::server {
namespace {

bool Before(const monitor::Sample& s, Timestamp t) { return s.time < t; }

}  // namespace

void SignalBuffer::Add(const std::string& signal, const monitor::Labels& labels, Timestamp t,
                       double value, bool dense) {
  std::lock_guard lk(mu_);
  History& h = data_[signal][labels];
  const monitor::Sample sample{t, value};
  if (h.empty() || h.back().time <= t) {
    if (!dense && h.size() >= 2 && t - h[h.size() - 2].time < opt_.spacing) {
      h.back() = sample;  // thin: the last sample stands for its spacing interval
    } else {
      h.push_back(sample);
    }
  } else {
    h.insert(std::lower_bound(h.begin(), h.end(), t, Before), sample);
  }
  while (h.size() > opt_.max_samples) h.pop_front();
}

std::optional<monitor::Sample> SignalBuffer::Latest(const std::string& signal,
                                                    const monitor::Labels& labels,
                                                    Timestamp since) const {
  std::lock_guard lk(mu_);
  auto s = data_.find(signal);
  if (s == data_.end()) return std::nullopt;
  auto h = s->second.find(labels);
  if (h == s->second.end() || h->second.empty() || h->second.back().time < since) {
    return std::nullopt;
  }
  return h->second.back();
}

void SignalBuffer::Prune(Timestamp now) {
  std::lock_guard lk(mu_);
  const Timestamp oldest = now - opt_.horizon;
  for (auto sit = data_.begin(); sit != data_.end();) {
    auto& series = sit->second;
    for (auto it = series.begin(); it != series.end();) {
      History& h = it->second;
      while (!h.empty() && h.front().time < oldest) h.pop_front();
      it = h.empty() ? series.erase(it) : std::next(it);
    }
    sit = series.empty() ? data_.erase(sit) : std::next(sit);
  }
}

void SignalBuffer::Forget(
    const std::function<bool(const std::string&, const monitor::Labels&)>& match) {
  std::lock_guard lk(mu_);
  for (auto& entry : data_) {  // (clang 14 cannot capture a structured binding)
    const std::string& signal = entry.first;
    std::erase_if(entry.second, [&](const auto& kv) { return match(signal, kv.first); });
  }
}

std::vector<monitor::Series> SignalBuffer::Query(const std::string& signal, Timestamp from,
                                                 Timestamp to) const {
  std::vector<monitor::Series> out;
  std::lock_guard lk(mu_);
  auto s = data_.find(signal);
  if (s == data_.end()) return out;
  for (const auto& [labels, h] : s->second) {
    auto begin = std::lower_bound(h.begin(), h.end(), from, Before);
    auto end = std::upper_bound(h.begin(), h.end(), to,
                                [](Timestamp t, const monitor::Sample& x) { return t < x.time; });
    if (begin < end)
      out.push_back(monitor::Series{labels, std::vector<monitor::Sample>(begin, end)});
  }
  return out;
}

size_t SignalBuffer::series_count() const {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (const auto& [signal, series] : data_) n += series.size();
  return n;
}

size_t SignalBuffer::sample_count() const {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (const auto& [signal, series] : data_) {
    for (const auto& [labels, h] : series) n += h.size();
  }
  return n;
}

}  // namespace trainyard::server
