#!/usr/bin/env python3
"""Fails when the llama.cpp build could use ggml's AMX path (scripts/check_llama_cpp.sh runs this).

ggml's AMX matmul segfaults in the pinned llama.cpp (ggml-org/llama.cpp#20824), so
cmake/specdecLlamaCpp.cmake switches the AMX instruction sets off by flag. Three checks, so that the
test fails on any machine, not only on one with AMX, if that stops holding (a change of the pin, of
ggml's CMake, of the flags):

  1. flags: ggml-cpu's own compile command (compile_commands.json), with its -march set to an AMX CPU's
     (sapphirerapids), defines no AMX macro; and, so that this probe cannot pass blindly, the same
     command without specdec's -mno-amx-* flags does define __AMX_INT8__;
  2. code: no AMX instruction in the programs (objdump -d);
  3. run time: `specdec_llama_cpp --system-info` (its output given as --system-info FILE) reports no
     AMX feature, no AMX buffer type on offer and no model weights in an AMX buffer.

Usage: llama_cpp_no_amx.py --build DIR --system-info FILE PROGRAM...
"""
import argparse
import json
import re
import shlex
import subprocess
import sys

AMX_CPU = "sapphirerapids"
# Every AMX mnemonic (tile configuration, loads and stores, the dot products and their successors).
AMX_INSTRUCTION = re.compile(
    r":\s+(ldtilecfg|sttilecfg|tilerelease|tilezero|tileload\w*|tilestore\w*|tilemov\w*|tdp\w+|tcmm\w+|"
    r"t2rpntlv\w*|tconj\w*|ttdp\w*|ttcmm\w*|t?tmmultf32ps|ttransposed|tcvtrow\w*)\b")


def fail(message):
    print(f"llama_cpp_no_amx: FAILED: {message}")
    sys.exit(1)


def macros(command, language):
    """The macros the compile command defines for an empty translation unit."""
    out = subprocess.run(command + ["-dM", "-E", "-x", language, "/dev/null"], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"the probe did not preprocess: {shlex.join(command)}\n{out.stderr}")
    return {line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define ")}


def probe_command(entry, keep_no_amx):
    """ggml-cpu's compile command for `entry`, reduced to its flags, with an AMX CPU's -march."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    flags, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg == entry["file"] or arg in ("-MD", "-MMD"):
            continue
        if not keep_no_amx and arg.startswith("-mno-amx"):
            continue
        flags.append("-march=" + AMX_CPU if arg == "-march=native" else arg)
    if not any(f.startswith("-march=") for f in flags):  # an explicit instruction-set list: AMX CPU first
        flags.insert(0, "-march=" + AMX_CPU)
    return [args[0]] + flags


def check_flags(build):
    try:
        entries = json.load(open(f"{build}/compile_commands.json", encoding="utf-8"))
    except OSError as error:
        fail(f"{error}: configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    # The files whose AMX code the macros switch on: the C++ kernels and buffer type, the C graph code.
    cpu = [e for e in entries if re.search(r"ggml-cpu/(amx/amx\.cpp|ggml-cpu\.cpp|ggml-cpu\.c)$", e["file"])]
    if len(cpu) < 3:
        fail(f"ggml-cpu's amx.cpp, ggml-cpu.cpp and ggml-cpu.c are not all in {build}/compile_commands.json")
    for entry in cpu:
        name = entry["file"].split("ggml-cpu/")[-1]
        language = "c" if name.endswith(".c") else "c++"
        built = macros(probe_command(entry, keep_no_amx=True), language)
        amx = sorted(m for m in built if m.startswith("__AMX") or m.startswith("GGML_AMX"))
        if amx:
            fail(f"ggml-cpu/{name}, compiled for an AMX CPU (-march={AMX_CPU}), would define {', '.join(amx)}")
        if "__AMX_INT8__" not in macros(probe_command(entry, keep_no_amx=False), language):
            fail(f"blind probe: ggml-cpu/{name}'s command without -mno-amx-* does not define __AMX_INT8__ "
                 f"under -march={AMX_CPU} either, so it cannot tell whether AMX is off")
    print(f"flags: ggml-cpu compiled for an AMX CPU (-march={AMX_CPU}) defines no AMX macro "
          f"(without specdec's -mno-amx-* flags it would: __AMX_INT8__)")


def check_code(programs):
    for program in programs:
        listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", program], capture_output=True, text=True,
                                 check=True).stdout
        found = [m.group(1) for m in AMX_INSTRUCTION.finditer(listing)]
        if found:
            fail(f"{program}: {len(found)} AMX instructions ({', '.join(sorted(set(found)))})")
    print(f"code: no AMX instruction in {len(programs)} programs (objdump -d)")


def check_run_time(system_info):
    lines = dict(line.rstrip("\n").split(" ", 1) for line in open(system_info, encoding="utf-8") if " " in line)
    for key in ("SYSTEM", "CPU_EXTRA_BUFFER_TYPES", "MODEL_BUFFER_TYPES"):
        if key not in lines:
            fail(f"{system_info} has no {key} line (specdec_llama_cpp --system-info)")
    if re.search(r"AMX\w* = 1", lines["SYSTEM"]):
        fail(f"llama.cpp reports AMX: {lines['SYSTEM']}")
    for key in ("CPU_EXTRA_BUFFER_TYPES", "MODEL_BUFFER_TYPES"):
        if "AMX" in lines[key].upper():
            fail(f"{key}: {lines[key]}")
    print(f"run time: no AMX feature; CPU buffer types on offer: {lines['CPU_EXTRA_BUFFER_TYPES']}; "
          f"the model's weights in: {lines['MODEL_BUFFER_TYPES']}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--system-info", required=True)
    parser.add_argument("programs", nargs="+")
    args = parser.parse_args()
    check_flags(args.build)
    check_code(args.programs)
    check_run_time(args.system_info)


if __name__ == "__main__":
    main()
