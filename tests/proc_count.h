// Counting what a test process holds, from /proc (shared by the fault and soak tests).
#pragma once

#include <dirent.h>

#include <cstring>

namespace chorus::test {

// Entries of a directory whose names start with `prefix` (dot entries excepted).
inline int countDir(const char* path, const char* prefix = "") {
  int n = 0;
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && std::strncmp(e->d_name, prefix, std::strlen(prefix)) == 0) ++n;
    }
    closedir(d);
  }
  return n;
}

}  // namespace chorus::test
