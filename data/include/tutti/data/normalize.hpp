#pragma once
// Normalising one document before deduplication and tokenization:
//   - it must be valid UTF-8 (a refusal names the byte offset);
//   - CR LF and lone CR become LF; other control characters except tab and
//     LF are dropped; trailing spaces and tabs of each line are dropped;
//   - runs of more than one blank line become one blank line;
//   - leading and trailing whitespace of the document is dropped.
// Unicode normal forms (NFKC) are left to the tokenizer: SentencePiece
// applies its own normaliser, and byte-level models see text as it is.

#include <cstdint>
#include <string>
#include <string_view>

#include "tutti/base/status.hpp"

namespace tutti::data {

// Offset of the first byte that is not part of valid UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or npos.
std::size_t first_invalid_utf8(std::string_view text);

// The normalised text; fails naming the offset of invalid UTF-8.
expected<std::string> normalize_document(std::string_view text);

} // namespace tutti::data
