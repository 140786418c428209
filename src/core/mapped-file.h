// A read-only view of a whole file: memory-mapped (default) or read into an owned buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace memtile {

struct load_options {
    bool use_mmap = true;   // false: read the file into an owned, page-aligned buffer (--no-mmap)
    bool mlock = false;     // lock the pages in RAM (failure is reported as a warning, not an error)
    bool prefault = false;  // touch every page before returning (MAP_POPULATE + read)
    // Copy the file into anonymous memory backed by 2 MiB pages (--hugepages): a hugetlbfs page (MAP_HUGETLB)
    // when the pool has room for the whole file, else transparent huge pages (madvise MADV_HUGEPAGE), which the
    // kernel may grant in part or not at all. Page-cache mappings of regular files rarely get huge pages,
    // hence the copy. Implies !use_mmap.
    bool hugepages = false;
};

class mapped_file {
public:
    static std::shared_ptr<mapped_file> open(const std::string& path, const load_options& opts = {});
    // Wraps bytes the caller already owns (tests, fuzzing); no copy is made.
    static std::shared_ptr<mapped_file> from_memory(std::string name, std::span<const uint8_t> bytes);
    ~mapped_file();
    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;

    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    bool is_mmapped() const { return mapped_; }
    bool is_locked() const { return locked_; }
    const std::string& warning() const { return warning_; }  // e.g. why mlock failed
    // How the bytes are held: "mmap", "read" (--no-mmap), "hugetlbfs" or "thp" (--hugepages).
    const std::string& memory_mode() const { return mode_; }

private:
    mapped_file() = default;
    void read_all(int fd, uint8_t* dst);
    void read_into_huge_pages(int fd);
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    bool owned_ = false;
    bool locked_ = false;
    size_t anon_bytes_ = 0;  // length of the anonymous mapping (--hugepages), unmapped by the destructor
    std::string warning_, mode_ = "mmap";
};

}  // namespace memtile
