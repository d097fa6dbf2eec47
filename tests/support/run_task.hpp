// Drives one single-process coroutine (ref or plain backends) to completion.
#pragma once

namespace mpcache::testing {

template <class T>
T run(Task<T> task) {
  Scheduler scheduler;
  return sync_wait(scheduler, std::move(task));
}

}  // namespace mpcache::testing
