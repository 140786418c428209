#include <gtest/gtest.h>

#include "gguf/gguf-file.h"

TEST(gguf, placeholder) { SUCCEED(); }
