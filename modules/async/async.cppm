// mpcache.async: lazy tasks, when_all, a single-threaded scheduler, sync_wait.
module;
#include "prelude.hpp"
export module mpcache.async;
export import :task;
export import :scheduler;
export import :when_all;
export import :sync_wait;
