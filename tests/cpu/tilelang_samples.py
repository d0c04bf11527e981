"""Hand-written TileLang kernels used to check lowering (tests/cpu/test_lower.py).

Each factory returns a ``T.prim_func``; nothing here needs a GPU. They follow the
shapes of the seed kernels the project started from (GEMM, flash attention, row softmax)
and are the templates the plan -> TileLang emitter is meant to reproduce.
"""

import tilelang.language as T


def gemm(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=64,
         num_stages=3, threads=128, dtype="float16", accum_dtype="float32"):
    """C[M,N] = A[M,K] @ B[K,N], fp32 accumulate, K streamed in a pipeline."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def flash_attention(heads=2, t_q=256, t_kv=256, d=128, block_M=128, block_N=128,
                    num_stages=2, threads=256, dtype="float16", accum_dtype="float32",
                    full_row=True):
    """O = softmax(Q K^T) V per head, no 1/sqrt(d) scale, online softmax over t_kv.

    exp(x) is computed as exp2(x * log2 e); the state is (m, l, acc_o) per row.
    Both GEMMs need policy=FullRow (each warp owns whole rows): with the default
    policy the layouts of S and P disagree and lowering fails with
    "Layout infer conflict between S and P" (full_row=False reproduces it).
    """
    LOG2E = 1.44269504  # log2(e)
    policy = T.GemmWarpPolicy.FullRow if full_row else T.GemmWarpPolicy.Square

    @T.prim_func
    def main(Q: T.Tensor((heads, t_q, d), dtype), K: T.Tensor((heads, t_kv, d), dtype),
             V: T.Tensor((heads, t_kv, d), dtype), O: T.Tensor((heads, t_q, d), dtype)):
        with T.Kernel(T.ceildiv(t_q, block_M), heads, threads=threads) as (bx, bh):
            Q_s = T.alloc_shared((block_M, d), dtype)
            K_s = T.alloc_shared((block_N, d), dtype)
            V_s = T.alloc_shared((block_N, d), dtype)
            S = T.alloc_fragment((block_M, block_N), accum_dtype)
            P = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, d), accum_dtype)
            m = T.alloc_fragment((block_M,), accum_dtype)
            m_prev = T.alloc_fragment((block_M,), accum_dtype)
            alpha = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            l = T.alloc_fragment((block_M,), accum_dtype)

            T.copy(Q[bh, bx * block_M:(bx + 1) * block_M, :], Q_s)
            T.fill(acc_o, 0)
            T.fill(l, 0)
            T.fill(m, -T.infinity(accum_dtype))
            for k in T.Pipelined(T.ceildiv(t_kv, block_N), num_stages=num_stages):
                T.copy(K[bh, k * block_N:(k + 1) * block_N, :], K_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True, policy=policy)  # S = Q K^T
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)  # m = max(m_prev, rowmax S)
                for i in T.Parallel(block_M):
                    alpha[i] = T.exp2(m_prev[i] * LOG2E - m[i] * LOG2E)
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.exp2(S[i, j] * LOG2E - m[i] * LOG2E)
                T.reduce_sum(S, row_sum, dim=1)  # clear=True by default
                for i in T.Parallel(block_M):
                    l[i] = l[i] * alpha[i] + row_sum[i]
                for i, j in T.Parallel(block_M, d):
                    acc_o[i, j] *= alpha[i]
                T.copy(S, P)  # fp32 -> fp16 for the second GEMM
                T.copy(V[bh, k * block_N:(k + 1) * block_N, :], V_s)
                T.gemm(P, V_s, acc_o, policy=policy)
            for i, j in T.Parallel(block_M, d):
                acc_o[i, j] /= l[i]
            T.copy(acc_o, O[bh, bx * block_M:(bx + 1) * block_M, :])

    return main


def dual_gemm_swiglu(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=64,
                     num_stages=2, threads=256, dtype="float16", accum_dtype="float32"):
    """C = silu(A @ B1) * (A @ B2): one A tile feeds two GEMMs in one K loop."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B1: T.Tensor((K, N), dtype),
             B2: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B1_s = T.alloc_shared((block_K, block_N), dtype)
            B2_s = T.alloc_shared((block_K, block_N), dtype)
            G = T.alloc_fragment((block_M, block_N), accum_dtype)
            U = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(G)
            T.clear(U)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B1[k * block_K, bx * block_N], B1_s)
                T.copy(B2[k * block_K, bx * block_N], B2_s)
                T.gemm(A_s, B1_s, G)
                T.gemm(A_s, B2_s, U)
            for i, j in T.Parallel(block_M, block_N):
                # silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
                G[i, j] = G[i, j] / (1.0 + T.exp(-G[i, j])) * U[i, j]
            T.copy(G, C[by * block_M, bx * block_N])

    return main
