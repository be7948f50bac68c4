// Rewrites an .npz from some of another's members (fittrain's zip reader and writer): for the
// EIT tests that need files with a member dropped or repeated under another name.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/zip_archive.h"

namespace ft::test {

// dst = src's members `names`, in order, then for each {to, from} of `copies` member `from`
// again under the name `to`. dst may be src.
inline void rewrite_npz(const std::string& src, const std::string& dst, const std::vector<std::string>& names,
                        const std::vector<std::pair<std::string, std::string>>& copies = {}) {
  const ZipArchive z = ZipArchive::open(src);
  std::vector<std::vector<uint8_t>> data;
  data.reserve(names.size() + copies.size());  // the entries point into these
  std::vector<ZipEntry> entries;
  auto add = [&](const std::string& name, const std::string& member) {
    const ZipMember* m = z.find(member);
    FT_CHECK(m, src, " has no member ", member);
    data.push_back(z.read(*m));
    entries.push_back({name, data.back()});
  };
  for (const std::string& n : names) add(n, n);
  for (const auto& [to, from] : copies) add(to, from);
  write_zip(dst, entries);
}

}  // namespace ft::test
