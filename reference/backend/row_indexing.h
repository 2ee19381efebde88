// The shapes of gather_rows and scatter_add_rows (backend.h), checked the same way by every
// backend: a table [N, C], the packed rows [R, C] and their int32 ids [R] into the table.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace tripod {

struct RowIndexing {
  int64_t table_rows = 0, rows = 0, channels = 0;
};

inline RowIndexing check_row_indexing(const char* op, const Tensor& table, const Tensor& packed, const Tensor& rows) {
  if (table.shape().size() != 2 || packed.shape().size() != 2 || table.shape()[1] != packed.shape()[1] ||
      rows.dtype() != DType::I32 || rows.numel() != packed.shape()[0] || table.dtype() != packed.dtype())
    fail(op, ": expected a table [N, C], rows [R, C] of its dtype and int32 ids [R]; got table ", table.describe(),
         ", rows ", packed.describe(), ", ids ", rows.describe());
  return {table.shape()[0], packed.shape()[0], table.shape()[1]};
}

}  // namespace tripod
