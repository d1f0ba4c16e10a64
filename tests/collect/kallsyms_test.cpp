// /proc/kallsyms text to functions: the text symbol at or below an address, modules' symbols
// too, data symbols and malformed lines skipped, unknown addresses as hex.
#include "rsched/collect/kallsyms.hpp"

#include <catch2/catch.hpp>

using rsched::collect::kallsyms;

TEST_CASE("kallsyms: an address names the text symbol at or below it", "[collect][wakeup]") {
  const auto k = kallsyms::parse("ffffffff81000000 T _stext\n"
                                 "ffffffff81001000 t io_schedule\n"
                                 "ffffffff81002000 D some_data\n"
                                 "garbage line\n"
                                 "zzzz T bad_address\n"
                                 "ffffffff81003000 T ext4_sync_file\n"
                                 "ffffffffc0001000 t xfs_file_fsync\t[xfs]\n"
                                 "0000000000000000 T hidden_by_kptr_restrict\n");
  CHECK(k.size() == 4);
  CHECK(k.name_of(0xffffffff81001010) == "io_schedule");
  CHECK(k.name_of(0xffffffff81002fff) == "io_schedule"); // data symbols are not functions
  CHECK(k.name_of(0xffffffff81003000) == "ext4_sync_file");
  CHECK(k.name_of(0xffffffffc0001234) == "xfs_file_fsync");
  CHECK(k.name_of(0x1000) == "0x1000");
  CHECK(kallsyms::parse("").name_of(0xffffffff81000000) == "0xffffffff81000000");
}
