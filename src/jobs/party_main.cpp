// mpcache-party: the job runner of mpcache-jobs, one party of a
// multi-process job (party_job.hpp). run_local_job starts three of it for
// mpcache-bench (--processes 3, preset net); the `mpcache` CLI starts itself
// as `mpcache party`, which takes the same flags and runs the same code.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;
#include "party_job.hpp"

int main(int argc, char** argv) { return mpcache::jobs::party_main(argc, argv); }
