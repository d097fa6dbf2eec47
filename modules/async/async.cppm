// mpcache.async: lazy tasks, stop signals, when_all, a single-threaded scheduler, sync_wait.
export module mpcache.async;
import mpcache.std;
export import :stop;
export import :task;
export import :scheduler;
export import :when_all;
export import :sync_wait;
