#pragma once
// doctest for the GPU tests. c10's logging (or glog, where torch uses it) defines CHECK and
// CHECK_EQ-style macros; doctest's must win, so include this after every torch header.
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>
