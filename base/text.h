// Text people type and read: the names an admin gives (volumes, export
// paths, reserve names) and what a terminal shows of them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace nasgw {

// The length of the valid UTF-8 sequence (1..4 bytes: no overlong forms,
// no surrogates, nothing past U+10FFFF) starting at s[i]; 0 when the bytes
// there are not one.
size_t Utf8SequenceAt(std::string_view s, size_t i);

// "" when `s` is valid UTF-8 without control characters (C0 U+0000..U+001F,
// DEL U+007F, C1 U+0080..U+009F: what a terminal acts on); else what is
// wrong and where, e.g. "a control character (\x1b) at byte 3" or
// "invalid UTF-8 (\xff) at byte 0".
std::string TextProblem(std::string_view s);

// `s` safe to print on a terminal: every control character and every byte
// that is not part of valid UTF-8 written as \xNN (lower-case hex), a
// backslash as \\, the rest as it is. Plain text comes back unchanged.
std::string EscapeForTerminal(std::string_view s);

// The same, but a backslash is left as it is: for messages that may already
// hold escapes (an error message quoting an escaped name).
std::string EscapeControls(std::string_view s);

// Columns EscapeForTerminal(s) takes, counting one per code point (wide
// characters are not told apart).
size_t TerminalWidth(std::string_view s);

}  // namespace nasgw
