#include "core/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace memtile {
namespace {

struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

std::shared_ptr<mapped_file> mapped_file::open(const std::string& path, const load_options& opts) {
    fd_guard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) fail("io", "cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) fail("io", "cannot stat '{}': {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("io", "'{}' is not a regular file", path);

    std::shared_ptr<mapped_file> f(new mapped_file());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ == 0) {
        static const uint8_t empty = 0;
        f->data_ = &empty;
        return f;
    }
    if (opts.hugepages) {
        f->read_into_huge_pages(fd.fd);
    } else if (opts.use_mmap) {
        int flags = MAP_PRIVATE;
        if (opts.prefault) flags |= MAP_POPULATE;
        void* p = ::mmap(nullptr, f->size_, PROT_READ, flags, fd.fd, 0);
        if (p == MAP_FAILED) fail("io", "cannot mmap '{}' ({} bytes): {}", path, f->size_, std::strerror(errno));
        f->data_ = static_cast<const uint8_t*>(p);
        f->mapped_ = true;
    } else {
        const size_t page = 4096;
        void* p = std::aligned_alloc(page, (f->size_ + page - 1) / page * page);
        if (!p) fail("io", "cannot allocate {} bytes to read '{}'", f->size_, path);
        f->data_ = static_cast<const uint8_t*>(p);
        f->owned_ = true;
        f->mode_ = "read";
        f->read_all(fd.fd, static_cast<uint8_t*>(p));
    }
    if (opts.mlock) {
        if (::mlock(f->data_, f->size_) == 0)
            f->locked_ = true;
        else
            f->warning_ = fmt::format("mlock of {} bytes failed: {} (raise RLIMIT_MEMLOCK, e.g. ulimit -l unlimited)",
                                      f->size_, std::strerror(errno));
    }
    if (opts.prefault) {
        uint8_t acc = 0;
        for (size_t i = 0; i < f->size_; i += 4096) acc ^= f->data_[i];
        asm volatile("" : : "r"(acc));  // keep the reads: their side effect (faulting pages in) is the point
    }
    return f;
}

void mapped_file::read_all(int fd, uint8_t* dst) {
    size_t done = 0;
    while (done < size_) {
        ssize_t n = ::pread(fd, dst + done, size_ - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            fail("io", "short read of '{}' at offset {}: {}", path_, done,
                 n < 0 ? std::strerror(errno) : "end of file");
        done += static_cast<size_t>(n);
    }
}

void mapped_file::read_into_huge_pages(int fd) {
    constexpr size_t huge = size_t(2) << 20;
    const size_t bytes = (size_ + huge - 1) / huge * huge;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
        mode_ = "hugetlbfs";
        anon_bytes_ = bytes;
        data_ = static_cast<const uint8_t*>(p);
    } else {
        // Over-allocate by one huge page so the data can start on a 2 MiB boundary (THP needs aligned ranges).
        p = ::mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("io", "cannot map {} bytes for '{}': {}", bytes + huge, path_, std::strerror(errno));
        auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1));
        const size_t head = size_t(aligned - static_cast<uint8_t*>(p));
        if (head > 0) ::munmap(p, head);
        if (huge - head > 0) ::munmap(aligned + bytes, huge - head);
        if (::madvise(aligned, bytes, MADV_HUGEPAGE) != 0)
            warning_ = fmt::format("madvise(MADV_HUGEPAGE) failed: {} (transparent huge pages disabled?)",
                                   std::strerror(errno));
        mode_ = "thp";
        anon_bytes_ = bytes;
        data_ = aligned;
    }
    read_all(fd, const_cast<uint8_t*>(data_));
}

std::shared_ptr<mapped_file> mapped_file::from_memory(std::string name, std::span<const uint8_t> bytes) {
    std::shared_ptr<mapped_file> f(new mapped_file());
    f->path_ = std::move(name);
    f->data_ = bytes.data();
    f->size_ = bytes.size();
    return f;
}

mapped_file::~mapped_file() {
    if (locked_) ::munlock(data_, size_);
    if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
    if (anon_bytes_ > 0) ::munmap(const_cast<uint8_t*>(data_), anon_bytes_);
    if (owned_) std::free(const_cast<uint8_t*>(data_));
}

}  // namespace memtile
