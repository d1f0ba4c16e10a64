#pragma once
// The protobuf wire format, the part rsched::trace needs (protobuf.dev/programming-guides/
// encoding): varints (wire type 0) and length-delimited fields (2). int32/int64 values are
// written as the sign-extended 64-bit varint protobuf uses for them.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rsched::trace::pb {

enum : std::uint32_t { wire_varint = 0, wire_i64 = 1, wire_len = 2, wire_i32 = 5 };

inline void put_varint(std::string &out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(v) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline void put_tag(std::string &out, std::uint32_t field, std::uint32_t wire) {
  put_varint(out, (std::uint64_t{field} << 3) | wire);
}

inline void put_uint(std::string &out, std::uint32_t field, std::uint64_t v) {
  put_tag(out, field, wire_varint);
  put_varint(out, v);
}

inline void put_int(std::string &out, std::uint32_t field, std::int64_t v) {
  put_uint(out, field, static_cast<std::uint64_t>(v));
}

inline void put_bytes(std::string &out, std::uint32_t field, std::string_view v) {
  put_tag(out, field, wire_len);
  put_varint(out, v.size());
  out.append(v);
}

// A reader over one message's bytes. next() yields each field; errors leave ok() false.
class reader {
public:
  explicit reader(std::string_view b) : b_(b) {}
  struct field {
    std::uint32_t number = 0;
    std::uint32_t wire = 0;
    std::uint64_t value = 0; // varint, or fixed 32/64
    std::string_view bytes;  // length-delimited
  };
  // The next field, or nullopt at the end or on an error (then ok() is false).
  std::optional<field> next() {
    if (pos_ >= b_.size() || !ok_) {
      return std::nullopt;
    }
    field f;
    auto tag = varint();
    if (!tag) {
      return fail();
    }
    f.number = static_cast<std::uint32_t>(*tag >> 3);
    f.wire = static_cast<std::uint32_t>(*tag & 7);
    if (f.number == 0) {
      return fail();
    }
    switch (f.wire) {
    case wire_varint: {
      auto v = varint();
      if (!v) {
        return fail();
      }
      f.value = *v;
      break;
    }
    case wire_len: {
      auto n = varint();
      if (!n || *n > b_.size() - pos_) {
        return fail();
      }
      f.bytes = b_.substr(pos_, static_cast<std::size_t>(*n));
      pos_ += static_cast<std::size_t>(*n);
      break;
    }
    case wire_i64:
    case wire_i32: {
      const std::size_t n = f.wire == wire_i64 ? 8 : 4;
      if (n > b_.size() - pos_) {
        return fail();
      }
      for (std::size_t i = 0; i < n; ++i) {
        f.value |= std::uint64_t{static_cast<std::uint8_t>(b_[pos_ + i])} << (8 * i);
      }
      pos_ += n;
      break;
    }
    default:
      return fail();
    }
    return f;
  }
  // The next varint of a packed field's bytes.
  std::optional<std::uint64_t> varint() {
    std::uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) {
        return std::nullopt;
      }
      const auto c = static_cast<std::uint8_t>(b_[pos_++]);
      v |= std::uint64_t{c & 0x7FU} << shift;
      if ((c & 0x80U) == 0) {
        return v;
      }
    }
    return std::nullopt;
  }
  [[nodiscard]] bool ok() const { return ok_; }
  [[nodiscard]] bool at_end() const { return pos_ >= b_.size(); }

private:
  std::nullopt_t fail() {
    ok_ = false;
    return std::nullopt;
  }
  std::string_view b_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

} // namespace rsched::trace::pb
