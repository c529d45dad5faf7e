// tokensleuth-profile: time every node of a model's real graph, as llama-bench runs it.
//
// Built by tokensleuth as an extra target of the engine's own CMake build (profile.cmake),
// against that build's llama and ggml. It loads the model like llama-bench does, runs the
// workload (pN: one prompt of N tokens; gN: N generated tokens, one decode each) after one
// warm-up, and asks the scheduler's eval callback for every node that computes something:
// the scheduler then computes the graph node by node, and the time between a node's "ask"
// and its "done" callback is that node's. On a GPU backend each node is synchronised, which
// removes overlap and fusion; on the CPU it is close to the real time.
//
// With -g 1 (groups) the callback asks only at the end of a chain of dependent ops: a node
// whose next node reads it (and is not a matrix product or attention, which start a group of
// their own) is computed together with it, so a GPU backend can still fuse the chain, and the
// chain is timed as one node named by its ops ("RMS_NORM+MUL"). Which nodes chain is learnt
// in the warm-up, where the callback asks for no node and the graph runs whole.
//
// Output (stdout): one JSON line per repetition:
//   {"rep": R, "test": "tg32", "tokens": 32, "wall_ns": W, "graph_ns": G,
//    "ops": [["MUL_MAT", "q8_0 [2048,768,128] x f32 [2048,8,1]", nodes, ns], ...]}
// wall_ns: the workload's decode calls end to end; graph_ns: the sum of node times.
#include "llama.h"
#include "ggml.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

// the calls this version has (tokensleuth.sources.profiler.api_defines reads its llama.h)
#if TS_MEMORY == 3
#define TS_MEMORY_CLEAR(ctx) llama_kv_cache_clear(ctx)
#elif TS_MEMORY == 2
#define TS_MEMORY_CLEAR(ctx) llama_kv_self_clear(ctx)
#else
#define TS_MEMORY_CLEAR(ctx) llama_memory_clear(llama_get_memory(ctx), true)
#endif
#if TS_LOAD == 2
#define TS_LOAD_MODEL llama_load_model_from_file
#else
#define TS_LOAD_MODEL llama_model_load_from_file
#endif
#if TS_CONTEXT == 2
#define TS_NEW_CONTEXT llama_new_context_with_model
#else
#define TS_NEW_CONTEXT llama_init_from_model
#endif
#if TS_VOCAB == 2
#define TS_N_VOCAB(model) llama_n_vocab(model)
#else
#define TS_N_VOCAB(model) llama_vocab_n_tokens(llama_model_get_vocab(model))
#endif
#if TS_FREE == 2
#define TS_FREE_MODEL llama_free_model
#else
#define TS_FREE_MODEL llama_model_free
#endif

using clk = std::chrono::steady_clock;

// one decode call of n tokens at positions pos0.., as llama-bench makes it
#if TS_PROCESS == 1
static int ts_decode(llama_context * ctx, llama_batch_ext * b, llama_token * toks, int n, int pos0) {
    llama_batch_ext_clear(b);
    for (int i = 0; i < n; i++) {
        const int idx = llama_batch_ext_add_token(b, 0, toks[i]);
        if (idx < 0) return -100;
        const llama_pos p = pos0 + i;
        llama_batch_ext_set_pos(b, idx, &p);
        if (i == n - 1) llama_batch_ext_set_output_logits(b, idx, true);
    }
    return llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b);
}
#else
struct llama_batch_ext;
static int ts_decode(llama_context * ctx, llama_batch_ext *, llama_token * toks, int n, int) {
    return llama_decode(ctx, llama_batch_get_one(toks, n));
}
#endif

struct Prof {
    bool on = false;
    bool groups = false;  // -g 1: time chains of dependent ops as one node
    clk::time_point asked;
    // groups: per node (name and op), 1 = its next node reads it (chained), 2 = not, 3 = both seen
    std::map<std::string, int> chain;
    const ggml_tensor * prev = nullptr;  // the warm-up's last node that computes something
    std::string prev_key;
    std::string group_ops, group_sig;  // the chain so far, before its last node
    std::map<std::pair<std::string, std::string>, std::pair<long long, long long>> ops;  // -> (nodes, ns)
    long long graph_ns = 0;
};

static std::string shape(const ggml_tensor * t) {
    std::string s = ggml_type_name(t->type);
    s += " [";
    const int n = ggml_n_dims(t);
    for (int i = 0; i < n; i++) {
        s += std::to_string(t->ne[i]);
        if (i + 1 < n) s += ",";
    }
    return s + "]";
}

static bool is_free(const ggml_tensor * t) {
    switch (t->op) {
        case GGML_OP_NONE: case GGML_OP_VIEW: case GGML_OP_RESHAPE: case GGML_OP_PERMUTE: case GGML_OP_TRANSPOSE:
            return true;
        default:
            return false;
    }
}

static std::string signature(const ggml_tensor * t) {
    std::string sig;
    for (int i = 0; i < GGML_MAX_SRC && t->src[i]; i++) {
        if (i == 2) { sig += " …"; break; }
        if (i) sig += " x ";
        sig += shape(t->src[i]);
    }
    return sig;
}

static std::string key(const ggml_tensor * t) { return std::string(t->name) + "|" + ggml_op_desc(t); }

static bool starts_group(const ggml_tensor * t) {
    return t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_MUL_MAT_ID || t->op == GGML_OP_FLASH_ATTN_EXT;
}

// the warm-up of -g 1: does this node read the last one (through its views)?
static void learn(Prof * p, const ggml_tensor * t) {
    if (p->prev) {
        bool reads = false;
        for (int i = 0; i < GGML_MAX_SRC && t->src[i]; i++) {
            const ggml_tensor * s = t->src[i];
            while (s->view_src) s = s->view_src;
            reads = reads || s == p->prev;
        }
        int & c = p->chain[p->prev_key];
        c |= (reads && !starts_group(t)) ? 1 : 2;
    }
    p->prev = t;
    p->prev_key = key(t);
}

static bool on_node(ggml_tensor * t, bool ask, void * user) {
    Prof * p = static_cast<Prof *>(user);
    if (ask) {
        if (is_free(t)) return false;
        if (!p->on) {
            if (p->groups) learn(p, t);
            return false;
        }
        if (p->groups) {
            const auto c = p->chain.find(key(t));
            if (c != p->chain.end() && c->second == 1) {  // computed with the node that reads it
                p->group_ops += std::string(ggml_op_desc(t)) + "+";
                if (p->group_sig.empty()) p->group_sig = signature(t);
                return false;
            }
        }
        p->asked = clk::now();
        return true;
    }
    if (!p->on) return true;
    const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - p->asked).count();
    const std::string op = p->group_ops + ggml_op_desc(t);
    const std::string sig = p->group_sig.empty() ? signature(t) : p->group_sig;
    p->group_ops.clear();
    p->group_sig.clear();
    auto & e = p->ops[{op, sig}];
    e.first += 1;
    e.second += ns;
    p->graph_ns += ns;
    return true;
}

static std::string esc(const std::string & s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if ((unsigned char) c < 0x20) { o += ' '; }
        else o += c;
    }
    return o;
}

static void quiet(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char ** argv) {
    const char * model_path = nullptr;
    int n_prompt = 0, n_gen = 0, reps = 3, threads = 0, ngl = 99, n_batch = 2048, n_ubatch = 512, groups = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        const char * v = argv[i + 1];
        if (a == "-m") model_path = v;
        else if (a == "-p") n_prompt = atoi(v);
        else if (a == "-n") n_gen = atoi(v);
        else if (a == "-r") reps = atoi(v);
        else if (a == "-t") threads = atoi(v);
        else if (a == "-ngl") ngl = atoi(v);
        else if (a == "-b") n_batch = atoi(v);
        else if (a == "-ub") n_ubatch = atoi(v);
        else if (a == "-g") groups = atoi(v);
        else { fprintf(stderr, "error: unknown argument %s\n", a.c_str()); return 2; }
    }
    if (!model_path || (n_prompt > 0) == (n_gen > 0) || reps < 1) {
        fprintf(stderr, "usage: %s -m MODEL (-p N | -n N) [-r REPS] [-t THREADS] [-ngl N] [-b N] [-ub N] [-g 1]\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = ngl;
    llama_model * model = TS_LOAD_MODEL(model_path, mp);
    if (!model) { fprintf(stderr, "error: cannot load %s\n", model_path); return 1; }
    Prof prof;
    prof.groups = groups != 0;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_prompt + n_gen + 16;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_ubatch;
    if (threads > 0) { cp.n_threads = threads; cp.n_threads_batch = threads; }
    cp.cb_eval = on_node;
    cp.cb_eval_user_data = &prof;
    llama_context * ctx = TS_NEW_CONTEXT(model, cp);
    if (!ctx) { fprintf(stderr, "error: cannot create a context\n"); return 1; }
    const int n_vocab = TS_N_VOCAB(model);
#if TS_PROCESS == 1
    llama_batch_ext * batch = llama_batch_ext_init(ctx);
#else
    llama_batch_ext * batch = nullptr;
#endif
    const int n = n_prompt > 0 ? n_prompt : n_gen;
    std::vector<llama_token> toks(n);
    for (int rep = -1; rep < reps; rep++) {  // rep -1: the warm-up, not timed
        TS_MEMORY_CLEAR(ctx);
        for (auto & t : toks) t = std::rand() % n_vocab;
        prof.ops.clear();
        prof.graph_ns = 0;
        prof.prev = nullptr;
        prof.group_ops.clear();
        prof.group_sig.clear();
        prof.on = rep >= 0;
        const auto t0 = clk::now();
        if (n_prompt > 0) {
            for (int done = 0; done < n_prompt; done += n_batch) {
                const int k = std::min(n_batch, n_prompt - done);
                if (ts_decode(ctx, batch, toks.data() + done, k, done) != 0) {
                    fprintf(stderr, "error: decode failed\n"); return 1;
                }
            }
        } else {
            for (int i = 0; i < n_gen; i++) {
                if (ts_decode(ctx, batch, &toks[i], 1, i) != 0) {
                    fprintf(stderr, "error: decode failed\n"); return 1;
                }
            }
        }
        llama_synchronize(ctx);
        const long long wall = std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - t0).count();
        if (rep < 0) continue;
        printf("{\"rep\": %d, \"test\": \"%s%d\", \"tokens\": %d, \"wall_ns\": %lld, \"graph_ns\": %lld, \"ops\": [",
               rep, n_prompt > 0 ? "pp" : "tg", n, n, wall, prof.graph_ns);
        bool first = true;
        for (const auto & kv : prof.ops) {
            printf("%s[\"%s\", \"%s\", %lld, %lld]", first ? "" : ", ", esc(kv.first.first).c_str(),
                   esc(kv.first.second).c_str(), kv.second.first, kv.second.second);
            first = false;
        }
        printf("]}\n");
        fflush(stdout);
    }
#if TS_PROCESS == 1
    llama_batch_ext_free(batch);
#endif
    llama_free(ctx);
    TS_FREE_MODEL(model);
    llama_backend_free();
    return 0;
}
