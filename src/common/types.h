// The C API's data types as every layer needs them: their sizes and names.
#pragma once

#include <cstddef>

#include "include/chorus/chorus.h"

namespace chorus {

// Bytes of one element (0 for a value that is not a chorusDataType_t).
size_t typeSize(chorusDataType_t t);
// "float32", "bfloat16", ...; "invalid" for a value that is not a type.
const char* typeName(chorusDataType_t t);

}  // namespace chorus
