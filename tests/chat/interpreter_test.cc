#include <gtest/gtest.h>
#include "chat/chat_template.h"
TEST(ChatInterpreter, Placeholder) {}
