// mpcache.serve: a private inference service. Three long-running servers
// (Server) share the model once and serve many sessions; clients outside
// them (request, run_client) give secret-shared prompts and learn only their
// own tokens. See docs/serving.md.
export module mpcache.serve;
import mpcache.std;
export import :messages;
export import :task_group;
export import :store_refill;
export import :batch_planner;
export import :server;
export import :server_parts;  // exports nothing: the server's parts, for src/serve/
export import :client;
