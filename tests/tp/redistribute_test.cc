#include "tests/test_util.h"
TEST(X,Y){}
