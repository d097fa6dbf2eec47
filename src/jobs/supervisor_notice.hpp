// A server's word to its supervisor, systemd's notify protocol (Type=notify):
// one datagram to the unix socket named by $NOTIFY_SOCKET ("@name": an
// abstract one). Written by hand, so the service needs no libsystemd.
// Include after `import mpcache;`.
#pragma once
#include <string>

namespace mpcache::jobs {

// Sends `state` (e.g. "READY=1") if $NOTIFY_SOCKET is set; "" when sent or
// not asked for, else why it could not be sent (for the log: a supervisor
// that hears nothing acts on its own timeout).
std::string notify_supervisor(const std::string& state);

}  // namespace mpcache::jobs
