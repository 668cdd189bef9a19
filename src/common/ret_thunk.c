/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The return thunk of SX_RET_AFTER_SYSCALL (common/hot.h, which says why):
 * a function so marked jumps here with its return address on top of the
 * stack, and this returns to it through an indirect jump, which the CPU
 * predicts from its branch target buffer, instead of a ret, which it
 * predicts from the return stack buffer that a system call's way back
 * refilled. %rcx is free at a return (the System V x86-64 ABI returns in
 * %rax, %rdx and the vector registers; %rcx is caller-saved). Hidden, so
 * that it never binds to, or for, another object's symbol of the same name.
 * The CFI lets debuggers and profilers unwind through it. It lies with
 * the pass's own code (SX_HOT_PASS, above in hot.h).
 */
#include "common/hot.h"

#if SX_RET_THUNK
__asm__(".pushsection .text.sorted.shardx.0pass, \"ax\", @progbits\n"
        ".globl __x86_return_thunk\n"
        ".hidden __x86_return_thunk\n"
        ".type __x86_return_thunk, @function\n"
        "__x86_return_thunk:\n"
        ".cfi_startproc\n"
        "popq %rcx\n"
        ".cfi_adjust_cfa_offset -8\n"
        ".cfi_register %rip, %rcx\n"
        "jmpq *%rcx\n"
        ".cfi_endproc\n"
        ".size __x86_return_thunk, . - __x86_return_thunk\n"
        ".popsection\n");
#else
typedef int sx_ret_thunk_unused_t; /* ISO C wants a declaration in every file */
#endif
