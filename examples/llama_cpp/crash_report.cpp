// SPDX-License-Identifier: Apache-2.0
// Linked into every program of the llama.cpp check (llama.cpp's unmodified simple.cpp included): on a
// fatal signal, prints which program died of which signal and its stack, then dies of that signal as
// before (the exit status stays 128 + signal). scripts/check_llama_cpp.sh reads the frames to tell a
// crash inside llama.cpp from one in specdec's code; the programs are linked with their symbols
// exported (ENABLE_EXPORTS) so that the frames carry function names.
//
//   CRASH program=specdec_llama_cpp signal=11 (SIGSEGV)
//   FRAME ./specdec_llama_cpp(ggml_backend_amx_mul_mat+0x1d2) [0x55d0c1a2b3c4]
//   ...
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace {

const char* program_name = "?";

void write_text(const char* text) {
  const std::size_t n = std::strlen(text);
  // Best effort: nothing useful can be done in a dying process when stderr is closed.
  if (::write(STDERR_FILENO, text, n) < 0) return;
}

void write_number(int value) {
  char digits[16];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && n < 15);
  char text[17];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n] = '\0';
  write_text(text);
}

// Only async-signal-safe calls, but for backtrace(), whose one unsafe step (loading libgcc on first
// use) install() takes before any signal can arrive.
void on_fatal_signal(int sig) {
  write_text("\nCRASH program=");
  write_text(program_name);
  write_text(" signal=");
  write_number(sig);
  write_text(" (");
  write_text(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGILL ? "SIGILL" : sig == SIGFPE ? "SIGFPE" : "SIGABRT");
  write_text(")\n");
  void* frames[64];
  const int count = backtrace(frames, 64);
  for (int i = 0; i < count; ++i) {  // backtrace_symbols_fd, unlike backtrace_symbols, does not allocate
    write_text("FRAME ");
    backtrace_symbols_fd(frames + i, 1, STDERR_FILENO);
  }
  ::raise(sig);  // SA_RESETHAND restored the default action: the process dies of `sig`
}

struct install {
  install() {
    void* warm[1];
    (void)backtrace(warm, 1);
    static char path[4096];
    const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) {
      path[n] = '\0';
      const char* slash = std::strrchr(path, '/');
      program_name = slash != nullptr ? slash + 1 : path;
    }
    // Its own stack, so that a stack overflow is reported too.
    static char stack[64 * 1024];
    stack_t alternate{};
    alternate.ss_sp = stack;
    alternate.ss_size = sizeof stack;
    (void)::sigaltstack(&alternate, nullptr);
    struct sigaction action{};
    action.sa_handler = on_fatal_signal;
    action.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) (void)::sigaction(sig, &action, nullptr);
  }
} const installed;

}  // namespace
