#include "coordinator/audit_writer.hpp"

#include <caf/event_based_actor.hpp>

#include <nlohmann/json.hpp>

#include <optional>

#include "tutti/runtime/log.hpp"

namespace tutti {

std::string audit_request(const security::audit_record& r) {
  return r.json_line();
}

caf::actor spawn_audit_writer(caf::actor_system& sys, const std::string& path,
                              journal_actor journal) {
  return sys.spawn<caf::detached>(
    [path, journal](caf::event_based_actor* self) -> caf::behavior {
      auto log = std::make_shared<std::optional<security::audit_log>>();
      if (auto opened = security::audit_log::open(path))
        *log = std::move(*opened);
      else
        log_error("audit", opened.message());
      return {
        [self, log, path, journal](const std::string& request) {
          auto j = nlohmann::json::parse(request, nullptr, false);
          if (j.is_discarded() || !*log) {
            log_error("audit",
                      "record not written to " + path + ": " + request);
            return;
          }
          security::audit_record r;
          r.user = j.value("user", "");
          r.role = j.value("role", "");
          r.source = j.value("source", "");
          r.command = j.value("command", "");
          r.target = j.value("target", "");
          r.decision = j.value("decision", "");
          r.result = j.value("result", "");
          auto written = (*log)->append(r);
          if (!written) {
            log_error("audit", written.message());
            return;
          }
          if (journal)
            self->send(journal, job_event{"audit", written->json_line(), 0});
        },
      };
    });
}

} // namespace tutti
