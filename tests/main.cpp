#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
