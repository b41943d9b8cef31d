// Bytes: checked arithmetic and parse_size.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"

using vramfit::Bytes;
using vramfit::InvalidInput;
using vramfit::Overflow;
using vramfit::parse_size;

namespace {
constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

/// The field an `InvalidInput` from parse_size names, or "<no error>".
std::string field_of_bad_size(const char* text) {
  try {
    (void)parse_size(text, "--budget");
  } catch (const InvalidInput& e) {
    return e.field();
  }
  return "<no error>";
}
}  // namespace

TEST_CASE("Bytes arithmetic is exact up to 2^64 - 1") {
  CHECK((Bytes(u64_max - 1) + Bytes(1)).count() == u64_max);
  CHECK((Bytes(7) - Bytes(7)).count() == 0);
  CHECK((Bytes(1ULL << 32) * (1ULL << 31)).count() == 1ULL << 63);
  CHECK((3 * Bytes(5)).count() == 15);
  CHECK(vramfit::bytes_of(2, {3, 5, 7}).count() == 210);
  CHECK(vramfit::max(Bytes(3), Bytes(9)) == Bytes(9));
  CHECK(vramfit::max(Bytes(9), Bytes(3)) == Bytes(9));
  Bytes b(10);
  b += Bytes(5);
  CHECK(b.count() == 15);
  b -= Bytes(15);
  CHECK(b.count() == 0);
}

TEST_CASE("Bytes arithmetic that leaves 64 bits throws Overflow") {
  CHECK_THROWS_AS(Bytes(u64_max) + Bytes(1), Overflow);
  CHECK_THROWS_AS(Bytes(0) - Bytes(1), Overflow);
  CHECK_THROWS_AS(Bytes(1ULL << 32) * (1ULL << 32), Overflow);
  CHECK_THROWS_AS((1ULL << 63) * Bytes(2), Overflow);
  CHECK_THROWS_AS(vramfit::bytes_of(2, {1ULL << 32, 1ULL << 31}), Overflow);
  Bytes b(u64_max);
  CHECK_THROWS_AS(b += Bytes(1), Overflow);
  CHECK(b.count() == u64_max);  // a refused operation leaves the value alone
  Bytes small(1);
  CHECK_THROWS_AS(small -= Bytes(2), Overflow);
  // 2^34 GiB = 2^64 bytes.
  CHECK_THROWS_AS(vramfit::literals::operator""_GiB(1ULL << 34), Overflow);
  CHECK(vramfit::literals::operator""_GiB((1ULL << 34) - 1).count() == u64_max - (1ULL << 30) + 1);
}

TEST_CASE("Bytes units") {
  using namespace vramfit::literals;
  CHECK((24_GiB).count() == 25769803776ULL);
  CHECK((23_GB).count() == 23000000000ULL);
  CHECK((3_MiB).count() == 3ULL * 1048576);
  CHECK((3_MB).count() == 3000000ULL);
  CHECK((2_KiB).count() == 2048);
  CHECK((Bytes(1500000000)).gigabytes() == doctest::Approx(1.5));
  CHECK((Bytes(3ULL << 29)).gibibytes() == doctest::Approx(1.5));
}

TEST_CASE("parse_size reads the forms people write") {
  CHECK(parse_size("24GiB").count() == 24ULL * 1024 * 1024 * 1024);
  CHECK(parse_size("23.0 GB").count() == 23000000000ULL);
  CHECK(parse_size("80e9B").count() == 80000000000ULL);
  CHECK(parse_size("16384MiB").count() == 16384ULL * 1024 * 1024);
  CHECK(parse_size("1.5 TiB").count() == 3ULL * (1ULL << 40) / 2);
  CHECK(parse_size("512B").count() == 512);
  CHECK(parse_size(" 7 GB ").count() == 7000000000ULL);
  CHECK(parse_size("512 B").count() == 512);
  CHECK(parse_size("2 kB").count() == 2000);
  CHECK(parse_size("2KiB").count() == 2048);
  CHECK(parse_size("1.25e3 MB").count() == 1250000000ULL);
  CHECK(parse_size("+4GB").count() == 4000000000ULL);
  CHECK(parse_size(".5GB").count() == 500000000ULL);
  CHECK(parse_size("1e-3 GB").count() == 1000000ULL);
  // Fractional bytes round down.
  CHECK(parse_size("1.9 B").count() == 1);
  CHECK(parse_size("0.5B").count() == 0);
  // The largest representable size, and with every significant digit.
  CHECK(parse_size("18446744073709551615B").count() == u64_max);
  CHECK(parse_size("1.8e19 B").count() == 18000000000000000000ULL);
}

TEST_CASE("parse_size units are case-insensitive") {
  for (const char* s : {"24gib", "24GIB", "24Gib", "24gIB"}) {
    CAPTURE(s);
    CHECK(parse_size(s).count() == 24ULL << 30);
  }
  for (const char* s : {"23 gb", "23 GB", "23 Gb", "23 gB"}) {
    CAPTURE(s);
    CHECK(parse_size(s).count() == 23000000000ULL);
  }
  CHECK(parse_size("3 mib").count() == 3ULL << 20);
  CHECK(parse_size("1 tb").count() == 1000000000000ULL);
  CHECK(parse_size("80E9b").count() == 80000000000ULL);
}

TEST_CASE("parse_size reads the short decimal units k, M, G, T") {
  CHECK(parse_size("24G").count() == 24000000000ULL);
  CHECK(parse_size("24 g").count() == 24000000000ULL);
  CHECK(parse_size("512M").count() == 512000000ULL);
  CHECK(parse_size("2k").count() == 2000);
  CHECK(parse_size("1T").count() == 1000000000000ULL);
}

// `--budget 24` meant 24 bytes, so max-batch answered 0: a number without a unit is refused, and
// the error suggests the two readings a person means.
TEST_CASE("parse_size refuses a number without a unit and suggests GB and GiB") {
  for (const char* bare : {"24", "80e9", "512", "0.5", " 7 ", "+4", "18446744073709551615"}) {
    CAPTURE(bare);
    CHECK(field_of_bad_size(bare) == "--budget");
  }
  try {
    (void)parse_size("24", "--budget");
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    const std::string what = e.what();
    CHECK(what == "--budget: '24' has no unit: write 24GB or 24GiB (a size without a unit would be bytes)");
    CHECK(what.find("24GB") != std::string::npos);
    CHECK(what.find("24GiB") != std::string::npos);
  }
}

TEST_CASE("parse_size refuses bad sizes, naming the field") {
  for (const char* bad : {"", "   ", "-1GB", "GB", "1.2.3", "12 XB", "1e99", "99999999999999999999999 GB", "1e",
                          "nan", "inf", "1e+", "18446744073709551616B", "2e19B", "17179869184 GiB", "1 GB GB",
                          "0x10", "1,5GB"}) {
    CAPTURE(bad);
    CHECK(field_of_bad_size(bad) == "--budget");
  }
}

TEST_CASE("parse_size errors say what is wrong and echo the input") {
  const auto message = [](const char* text) -> std::string {
    try {
      (void)parse_size(text, "--budget");
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "<no error>";
  };
  CHECK(message("-1GB").find("negative") != std::string::npos);
  CHECK(message("12 XB").find("unknown unit 'XB'") != std::string::npos);
  CHECK(message("12 XB").find("'12 XB'") != std::string::npos);
  CHECK(message("1e99").find("exponent") != std::string::npos);
  CHECK(message("2e19B").find("64 bits") != std::string::npos);
  CHECK(message("").find("empty") != std::string::npos);
  CHECK(message("GB").find("no digits") != std::string::npos);
  // The default field name.
  try {
    (void)parse_size("bogus");
    FAIL("no exception");
  } catch (const InvalidInput& e) {
    CHECK(e.field() == "size");
  }
}
