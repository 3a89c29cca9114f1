#include "base/text.h"

#include <gtest/gtest.h>

namespace nasgw {
namespace {

TEST(Text, Utf8Sequences) {
  EXPECT_EQ(Utf8SequenceAt("a", 0), 1u);
  EXPECT_EQ(Utf8SequenceAt("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(Utf8SequenceAt("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(Utf8SequenceAt("\xf0\x9f\x98\x80", 0), 4u);  // 😀
  EXPECT_EQ(Utf8SequenceAt("\xff", 0), 0u);
  EXPECT_EQ(Utf8SequenceAt("\xc3", 0), 0u);              // truncated
  EXPECT_EQ(Utf8SequenceAt("\xc0\xaf", 0), 0u);          // overlong '/'
  EXPECT_EQ(Utf8SequenceAt("\xe0\x80\xaf", 0), 0u);      // overlong
  EXPECT_EQ(Utf8SequenceAt("\xed\xa0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(Utf8SequenceAt("\xf4\x90\x80\x80", 0), 0u);  // beyond U+10FFFF
  EXPECT_EQ(Utf8SequenceAt("\x80", 0), 0u);              // a lone continuation byte
  EXPECT_EQ(Utf8SequenceAt("ab", 2), 0u);
}

TEST(Text, ProblemsNameWhatAndWhere) {
  EXPECT_EQ(TextProblem(""), "");
  EXPECT_EQ(TextProblem("vol-1.été_€"), "");
  EXPECT_EQ(TextProblem("a\x1b[2J"), "a control character (\\x1b) at byte 1");
  EXPECT_EQ(TextProblem("tab\there"), "a control character (\\x09) at byte 3");
  EXPECT_EQ(TextProblem("del\x7f"), "a control character (\\x7f) at byte 3");
  EXPECT_EQ(TextProblem("c1\xc2\x9b"), "a control character (\\xc2\\x9b) at byte 2");  // CSI
  EXPECT_EQ(TextProblem("\xc2\xa0"), "") << "U+00A0 is not a control character";
  EXPECT_EQ(TextProblem(std::string("nul\0", 4)), "a control character (\\x00) at byte 3");
  EXPECT_EQ(TextProblem("bad\xff"), "invalid UTF-8 (\\xff) at byte 3");
  EXPECT_EQ(TextProblem("\xc3("), "invalid UTF-8 (\\xc3) at byte 0");
}

TEST(Text, EscapesWhatATerminalWouldActOn) {
  EXPECT_EQ(EscapeForTerminal("plain name"), "plain name");
  EXPECT_EQ(EscapeForTerminal("été €"), "été €");
  EXPECT_EQ(EscapeForTerminal("a\x1b[31mred"), "a\\x1b[31mred");
  EXPECT_EQ(EscapeForTerminal("line\nbreak\r"), "line\\x0abreak\\x0d");
  EXPECT_EQ(EscapeForTerminal("\xc2\x9b"
                              "2J"),
            "\\xc2\\x9b2J");
  EXPECT_EQ(EscapeForTerminal("x\xff\xfey"), "x\\xff\\xfey");
  EXPECT_EQ(EscapeForTerminal("\xe2\x82"), "\\xe2\\x82") << "a truncated sequence";
  EXPECT_EQ(EscapeForTerminal("back\\x1b"), "back\\\\x1b") << "a literal backslash cannot pass for an escape";
  EXPECT_EQ(EscapeControls("name 'a\\x1b' holds\x1b[2J"), "name 'a\\x1b' holds\\x1b[2J");
  EXPECT_EQ(TerminalWidth("été"), 3u);
  EXPECT_EQ(TerminalWidth("a\x1b"), 5u);
}

}  // namespace
}  // namespace nasgw
