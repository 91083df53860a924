// One row's attention key/value cache for decoding: the keys (after RoPE) and values of the tokens it keeps, in
// buffers with room to grow. Appending T tokens copies those T tokens only; the first append leaves room for an eighth
// more (at least 64 tokens), and a full buffer is replaced by one twice the size of what it keeps (for a sliding
// window, at most its last `window` tokens), so the copying is amortised and the cost per decoded token does not grow
// with the cache. Copies of a cache share its buffers; appending to a copy that another copy has appended past (a
// branch) first moves its tokens into new buffers, so no cache ever sees another's tokens.
#pragma once
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace primer::layers {

class KvCache {
 public:
  // Appends keys and values [1, T, H, head_dim] of the tokens at next_position() onwards.
  void append(const Tensor& keys, const Tensor& values);
  // Forgets all but the last `count` tokens (a sliding window's).
  void keep_last(int64_t count);
  // The kept tokens' keys and values [1, size(), H, head_dim]: contiguous views of the buffers.
  Tensor keys() const;
  Tensor values() const;
  int64_t size() const { return end_ - begin_; }
  int64_t first_position() const { return position_; }  // the position of keys()[0]
  int64_t next_position() const { return position_ + size(); }
  int64_t capacity() const;  // the tokens the buffers hold before they are replaced

 private:
  struct Buffers {
    Tensor keys, values;  // [1, capacity, H, head_dim]
    int64_t end = 0;      // slots written by any cache that shares them
  };
  std::shared_ptr<Buffers> buffers_;
  int64_t begin_ = 0, end_ = 0;  // this cache's tokens: slots [begin_, end_)
  int64_t position_ = 0;         // the position of slot begin_
};

}  // namespace primer::layers
