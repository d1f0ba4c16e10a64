// The upstream topology JSON: exact serde_json pretty text, round trips, tolerated and rejected
// input, and garbage that must not crash.
#include "rsched/topology/json.hpp"
#include "rsched/topology/topology.hpp"

#include "fake_sysfs.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>

using namespace rsched::topology;

namespace {

cpu_info cpu(unsigned n, int die, int numa) {
  return {n, -1, -1, die, -1, numa};
}

topology parsed(std::string_view text) {
  auto r = from_json(text);
  INFO("from_json error: " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return r.value();
}

std::string error_of(std::string_view text) {
  auto r = from_json(text);
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().msg.find('\n') == std::string::npos); // one line
  return r.err().msg;
}

} // namespace

TEST_CASE("json: exact serde_json to_string_pretty text", "[topology]") {
  const topology t{{cpu(0, 0, 0), cpu(1, 1, -1)}};
  CHECK(to_json(t) == R"({
  "cpus": {
    "0": {
      "die": 0,
      "numa": 0
    },
    "1": {
      "die": 1,
      "numa": -1
    }
  }
})");
}

TEST_CASE("json: empty map prints {}", "[topology]") {
  CHECK(to_json(topology{}) == "{\n  \"cpus\": {}\n}");
  // CPUs that know neither their die nor their node are not written.
  CHECK(to_json(topology{{cpu(0, -1, -1), cpu(3, -1, -1)}}) == "{\n  \"cpus\": {}\n}");
}

TEST_CASE("json: keys in string order, like upstream's BTreeMap<String, _>", "[topology]") {
  topology t;
  for (unsigned n : {0u, 1u, 2u, 10u, 11u, 100u, 1023u}) {
    t.cpus.push_back(cpu(n, 0, 0));
  }
  const std::string j = to_json(t);
  std::vector<std::string> keys;
  for (std::size_t p = j.find("    \""); p != std::string::npos; p = j.find("    \"", p + 1)) {
    const auto end = j.find('"', p + 5);
    const std::string k = j.substr(p + 5, end - p - 5);
    if (k != "die" && k != "numa") {
      keys.push_back(k);
    }
  }
  CHECK(keys == std::vector<std::string>{"0", "1", "10", "100", "1023", "11", "2"});
}

TEST_CASE("json: round trip", "[topology]") {
  SECTION("hand-made, including negative ids") {
    const topology t{
        {cpu(0, 0, 0), cpu(1, 0, 0), cpu(2, 1, 1), cpu(7, -1, 1), cpu(12, 3, -1), cpu(1023, 2, 0)}};
    CHECK(parsed(to_json(t)) == t);
  }
  SECTION("from a loaded fake sysfs") {
    testing::fake_sysfs fs;
    for (unsigned c = 0; c < 12; ++c) {
      const std::string list = c < 6 ? "0-5" : "6-11";
      fs.cpu(c, {.package = 0, .core = static_cast<int>(c), .die_cpus_list = list, .l3 = list});
    }
    fs.node(0, "0-5");
    fs.node(1, "6-11");
    auto loaded = load(fs.root());
    REQUIRE(loaded.ok());
    const auto back = parsed(to_json(loaded.value()));
    REQUIRE(back.cpus.size() == 12);
    for (const auto &c : loaded.value().cpus) {
      const auto b = back.find(c.cpu);
      REQUIRE(b.has_value());
      CHECK(b->die == c.die);
      CHECK(b->numa == c.numa);
      CHECK(b->package == -1); // not carried by the file
      CHECK(b->llc == -1);
    }
    CHECK(back.num_dies() == 2);
    CHECK(back.num_numa_nodes() == 2);
  }
}

TEST_CASE("json: accepted input", "[topology]") {
  SECTION("compact, any key order, whitespace") {
    const auto t = parsed(" {\"cpus\":{\"10\":{\"numa\":1,\"die\":-1},\"2\":{\"die\":0,"
                          "\"numa\":0}}}\r\n\t");
    CHECK(t == topology{{cpu(2, 0, 0), cpu(10, -1, 1)}});
  }
  SECTION("empty map") {
    CHECK(parsed("{\"cpus\": {}}").cpus.empty());
  }
  SECTION("unknown fields of every JSON type are ignored") {
    const auto t = parsed(R"({
      "version": 2, "comment": "made by \"hand\" \u00e9 \ud83d\ude00", "f": 1.5e-3,
      "x": [1, [2, {"a": null}], true, false, "s"], "o": {"nested": {"deep": [[]]}},
      "cpus": {
        "0": {"die": 0, "numa": 0, "extra": {"k": [1, 2.5, -3e10]}, "flag": true, "n": null},
        "1": {"extra": [], "die": 1, "numa": 0}
      },
      "after": {}
    })");
    CHECK(t == topology{{cpu(0, 0, 0), cpu(1, 1, 0)}});
  }
  SECTION("keys >= 1024 are ignored") {
    const auto t = parsed(R"({"cpus": {"1023": {"die": 0, "numa": 0}, "1024": {"die": 1, "numa": 1},
                          "99999999999999999999999": {"die": 1, "numa": 1}}})");
    CHECK(t == topology{{cpu(1023, 0, 0)}});
  }
  SECTION("escaped key") {
    CHECK(parsed(R"({"cpus": {"\u0031": {"die": 4, "numa": 0}}})") == topology{{cpu(1, 4, 0)}});
  }
  SECTION("i32 limits") {
    CHECK(parsed(R"({"cpus": {"0": {"die": 2147483647, "numa": -2147483648}}})") ==
          topology{{cpu(0, 2147483647, -2147483647 - 1)}});
  }
  SECTION("entry with both ids unknown is kept (and classified, not 'outside the map')") {
    CHECK(parsed(R"({"cpus": {"5": {"die": -1, "numa": -1}}})").find(5).has_value());
  }
}

TEST_CASE("json: rejected input", "[topology]") {
  CHECK(error_of("").find("expected a JSON object") != std::string::npos);
  CHECK(error_of("[]").find("expected a JSON object") != std::string::npos);
  CHECK(error_of("{}").find("missing field `cpus`") != std::string::npos);
  CHECK(error_of(R"({"cpus": []})").find("`cpus` must be an object") != std::string::npos);
  CHECK(error_of(R"({"cpus": {"abc": {"die": 0, "numa": 0}}})").find("not a number") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"-1": {"die": 0, "numa": 0}}})").find("not a number") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"": {"die": 0, "numa": 0}}})").find("not a number") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"numa": 0}}})").find("missing field `die`") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 0}}})").find("missing field `numa`") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 1.0, "numa": 0}}})").find("integer") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 1e2, "numa": 0}}})").find("integer") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": "0", "numa": 0}}})").find("integer") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": null, "numa": 0}}})").find("integer") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 2147483648, "numa": 0}}})").find("32-bit") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 0, "numa": -2147483649}}})").find("32-bit") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 0, "die": 1, "numa": 0}}})").find("duplicate") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {"1": {"die": 0, "numa": 0}, "01": {"die": 1, "numa": 0}}})")
            .find("appears twice") != std::string::npos);
  CHECK(error_of(R"({"cpus": {}, "cpus": {}})").find("duplicate") != std::string::npos);
  // Keys >= 1024 are ignored but their objects must still be valid, as with serde.
  CHECK(error_of(R"({"cpus": {"5000": {"die": 0}}})").find("missing field `numa`") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {}} x)").find("expected end of input") != std::string::npos);
  CHECK(error_of(R"({"cpus": {},})").find("expected string literal") != std::string::npos);
  CHECK(error_of(R"({"cpus": {}, "x": 01})").find("expected '}'") != std::string::npos);
  CHECK(error_of(R"({"cpus": {}, "x": tru})").find("invalid literal") != std::string::npos);
  CHECK(error_of(R"({"cpus": {}, "x": "\q"})").find("forbidden character after backslash") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus": {}, "x": "\ud800"})").find("surrogate") != std::string::npos);
  CHECK(error_of("{\"cpus\": {}, \"x\": \"a\nb\"}").find("control character") != std::string::npos);
  CHECK(error_of(R"({"cpus": {"0": {"die": 0, "numa": 0})").find("unexpected end of input") !=
        std::string::npos);
  CHECK(error_of(R"({"cpus)").find("missing closing quote") != std::string::npos);
}

TEST_CASE("json: errors carry line and column", "[topology]") {
  const std::string text = "{\n  \"cpus\": {\n    \"0\": {\"die\": 0,, \"numa\": 0}\n  }\n}";
  const auto msg = error_of(text);
  CHECK(msg.find("line 3 column 20") != std::string::npos);
  CHECK(msg.rfind("topology JSON: ", 0) == 0);
}

TEST_CASE("json: errors in what the document says name the CPU", "[topology]") {
  CHECK(error_of(R"({"cpus": {"7": {"numa": 0}}})") ==
        "topology JSON: missing field `die` in CPU \"7\"");
  CHECK(error_of(R"({"cpus": {"3": {"die": 0, "numa": 1.5}}})") ==
        "topology JSON: `numa` in CPU \"3\" must be an integer");
  // A hostile key is quoted escaped, still on one line.
  CHECK(error_of("{\"cpus\": {\"a\\u001b[31m\\n\": {}}}") ==
        "topology JSON: CPU key \"a\\x1b[31m\\x0a\" is not a number");
}

TEST_CASE("json: deep nesting is an error, not a stack overflow", "[topology]") {
  const std::string deep =
      "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + ", \"cpus\": {}}";
  CHECK(error_of(deep).find("nesting") != std::string::npos);
  const std::string deep_obj = "{\"x\": " + [] {
    std::string s;
    for (int i = 0; i < 5000; ++i) {
      s += "{\"a\":";
    }
    return s;
  }();
  CHECK(error_of(deep_obj).find("nesting") != std::string::npos);
  // Nesting within serde's limit is fine.
  const std::string ok =
      "{\"x\": " + std::string(100, '[') + std::string(100, ']') + ", \"cpus\": {}}";
  CHECK(parsed(ok).cpus.empty());
}

TEST_CASE("json: random garbage and mutations never crash", "[topology]") {
  std::mt19937 rng(42);
  const std::string valid = to_json(topology{{cpu(0, 0, 0), cpu(1, 1, 1), cpu(10, 2, -1)}});
  const std::string alphabet = "{}[]\":,0123456789-.eE+ \n\\utrfalsn";
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s;
    switch (trial % 3) {
    case 0: { // random tokens
      const auto len = rng() % 40;
      for (unsigned i = 0; i < len; ++i) {
        s += alphabet[rng() % alphabet.size()];
      }
      break;
    }
    case 1: // truncation of a valid document
      s = valid.substr(0, rng() % valid.size());
      break;
    default: // a few random byte flips
      s = valid;
      for (int k = 0; k < 3; ++k) {
        s[rng() % s.size()] = static_cast<char>(rng() % 256);
      }
      break;
    }
    const auto r = from_json(s);
    if (r.ok()) {
      ++accepted;
      for (std::size_t i = 1; i < r.value().cpus.size(); ++i) {
        REQUIRE(r.value().cpus[i - 1].cpu < r.value().cpus[i].cpu);
      }
    } else {
      REQUIRE(r.err().msg.find('\n') == std::string::npos);
    }
  }
  // Some flips land in whitespace and keep the document valid; most inputs are rejected.
  CHECK(accepted < 20000);
}
