#include "engine/unicode_classes.h"

#include <algorithm>

namespace crowdtrain::engine::detail {

CharClass searchCharClass(char32_t codePoint)
{
    const CodePointRange* begin = kCodePointRanges;
    const CodePointRange* end = begin + kCodePointRangeCount;
    const CodePointRange* it = std::upper_bound(
        begin, end, codePoint, [](char32_t cp, const CodePointRange& range) { return cp < range.first; });
    if (it == begin)
        return CharClass::Other;
    --it;
    return codePoint <= it->last ? it->charClass : CharClass::Other;
}

} // namespace crowdtrain::engine::detail
