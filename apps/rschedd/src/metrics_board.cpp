// The published state and its cached text (metrics_board.hpp).
#include "rsched/rschedd/metrics_board.hpp"

#include <sstream>
#include <utility>

namespace rsched::rschedd {

namespace om = openmetrics;

void metrics_board::publish(const metrics_state &s) {
  auto copy = std::make_shared<const metrics_state>(s);
  {
    std::lock_guard lock(mu_);
    state_ = std::move(copy);
    ++generation_;
  }
  cv_.notify_all();
}

metrics_board::text metrics_board::render(om::format f) {
  const std::size_t i = f == om::format::openmetrics ? 1 : 0;
  std::shared_ptr<const metrics_state> s;
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(mu_);
    if (cache_[i] && cache_gen_[i] == generation_) {
      return {cache_[i], generation_};
    }
    s = state_;
    gen = generation_;
  }
  if (!s) {
    return {std::make_shared<const std::string>(), 0};
  }
  std::lock_guard render_lock(render_mu_);
  {
    std::lock_guard lock(mu_);
    if (cache_[i] && cache_gen_[i] >= gen) { // another reader rendered it meanwhile
      return {cache_[i], cache_gen_[i]};
    }
  }
  std::ostringstream out;
  s->render(out, f);
  auto body = std::make_shared<const std::string>(std::move(out).str());
  std::lock_guard lock(mu_);
  cache_[i] = body;
  cache_gen_[i] = gen;
  return {body, gen};
}

bool metrics_board::wait_newer(std::uint64_t generation) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopped_ || generation_ > generation; });
  return !stopped_;
}

void metrics_board::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

} // namespace rsched::rschedd
