// mpcache-party: the job runner of mpcache-jobs, one party of a
// multi-process job (party_job.hpp). run_local_job starts three of it for
// mpcache-bench (--processes 3, preset net); the `mpcache` CLI starts itself
// as `mpcache party`, which takes the same flags and runs the same code.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include <cstring>
#include "party_job.hpp"
#include "process_allocator.hpp"
#include "serve_job.hpp"

// `mpcache-party serve ...` and `mpcache-party client ...`: a service's
// processes for the bench's preset serve (serve_job.hpp).
int main(int argc, char** argv) {
  mpcache::jobs::tune_allocator_for_party();
  if (argc > 1 && std::strcmp(argv[1], "serve") == 0) return mpcache::jobs::serve_main(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "client") == 0) return mpcache::jobs::client_main(argc - 1, argv + 1);
  return mpcache::jobs::party_main(argc, argv);
}
