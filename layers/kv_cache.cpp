#include "layers/kv_cache.h"

#include <algorithm>

#include "core/check.h"

namespace primer::layers {

void KvCache::append(const Tensor& keys, const Tensor& values) {
  PRIMER_CHECK(keys.dim() == 4 && keys.size(0) == 1 && values.shape() == keys.shape() && values.dtype() == keys.dtype(),
               "the key/value cache takes one row's keys and values [1, T, H, head_dim], got {} and {}",
               keys.describe(), values.describe());
  const int64_t T = keys.size(1);
  if (buffers_)
    PRIMER_CHECK(buffers_->keys.size(2) == keys.size(2) && buffers_->keys.size(3) == keys.size(3) &&
                     buffers_->keys.dtype() == keys.dtype(),
                 "the key/value cache {} does not fit the new tokens' {}", buffers_->keys.describe(), keys.describe());
  // New buffers when there are none, when they are full, or when another copy of this cache wrote past its end.
  if (!buffers_ || buffers_->end != end_ || end_ + T > capacity()) {
    // A first append (a prompt's prefill) leaves an eighth more room (at least 64 tokens): a long prompt's cache then
    // takes 1.125x its size, not 2x, and the tokens generated after it are appended without a copy up to that room.
    const int64_t kept = size(), room = buffers_ ? 2 * (kept + T) : T + std::max<int64_t>(64, T / 8);
    auto fresh = std::make_shared<Buffers>();
    fresh->keys = Tensor::empty({1, room, keys.size(2), keys.size(3)}, keys.dtype(), keys.device());
    fresh->values = Tensor::empty(fresh->keys.shape(), keys.dtype(), keys.device());
    if (kept > 0) {
      fresh->keys.slice(1, 0, kept).copy_from(this->keys());
      fresh->values.slice(1, 0, kept).copy_from(this->values());
    }
    buffers_ = std::move(fresh);
    begin_ = 0;
    end_ = kept;
  }
  buffers_->keys.slice(1, end_, end_ + T).copy_from(keys);
  buffers_->values.slice(1, end_, end_ + T).copy_from(values);
  end_ += T;
  buffers_->end = end_;
}

void KvCache::keep_last(int64_t count) {
  if (size() <= count) return;
  position_ += size() - count;
  begin_ = end_ - count;
}

Tensor KvCache::keys() const {
  PRIMER_CHECK(buffers_, "the key/value cache is empty");
  return buffers_->keys.slice(1, begin_, end_);
}

Tensor KvCache::values() const {
  PRIMER_CHECK(buffers_, "the key/value cache is empty");
  return buffers_->values.slice(1, begin_, end_);
}

int64_t KvCache::capacity() const { return buffers_ ? buffers_->keys.size(1) : 0; }

}  // namespace primer::layers
