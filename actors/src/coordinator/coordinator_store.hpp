#pragma once
// Gloo's rendezvous store, served by the coordinator actor over CAF: ranks
// on any node find each other without a shared file system.

#include <caf/actor_system.hpp>
#include <gloo/rendezvous/store.h>

#include <chrono>

#include "tutti/actors/interfaces.hpp"

namespace tutti {

class coordinator_store final : public gloo::rendezvous::Store {
public:
  coordinator_store(caf::actor_system& sys, coordinator_actor coordinator,
                    std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

private:
  caf::actor_system& sys_;
  coordinator_actor coordinator_;
  std::chrono::milliseconds timeout_;
};

} // namespace tutti
