// mpcache.ops: fixed-point and selection functions written once, generic over
// the Protocol concept (rss3, plain, ...).
export module mpcache.ops;
import mpcache.std;
export import :layout;
export import :compare;
export import :reduce;
export import :one_hot;
export import :gather;
export import :topk;
export import :exp;
export import :octaves;
export import :reciprocal;
export import :softmax;
export import :cluster_attention;
export import :piecewise;
export import :activations;
export import :rsqrt;
export import :norm;
