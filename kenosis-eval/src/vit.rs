//! A vision transformer (ViT, Dosovitskiy et al. 2021, as timm's `VisionTransformer` writes
//! it) as an ONNX graph built here from named FP32 weights, as an exporter would write it
//! (issue 56). No pretrained ViT is obtainable where this project builds (a short search of
//! the PyPI and npm package lists found none that ships its weights), so the weights are
//! random, drawn by [`Weights::random`] from a fixed seed with timm's initialization. The
//! tensors carry timm's names and PyTorch's layouts (`[out, in]` linear weights), so that a
//! pretrained checkpoint's tensors could take their place in [`Weights::tensors`].
//!
//! The graph (default domain, opset 13, IR version 8):
//! - input `pixel_values`, f32 `[batch, channels, image, image]` (`batch` symbolic);
//! - patch embedding: `Conv` with kernel and stride `patch` (`patch_embed.proj`), flattened
//!   and transposed to `[batch, patches, dim]`; the learned `cls_token` `[1, 1, dim]`
//!   (`Expand`ed to the batch) `Concat`enated in front, then `Add` of the learned `pos_embed`
//!   `[1, patches + 1, dim]`;
//! - `depth` pre-LN blocks: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`. The attention is
//!   timm's: one `qkv` linear layer (`MatMul` `[dim, 3 dim]` + `Add`), `Reshape` to
//!   `[batch, tokens, 3, heads, head_dim]`, `Transpose` to `[3, batch, heads, tokens,
//!   head_dim]`, `Gather` of q, k, v, scores `q·kᵀ · head_dim^-½`, `Softmax`, `·v`, heads
//!   merged back and the `proj` linear layer. The MLP: `fc1` (`dim → mlp`), exact (erf) GELU,
//!   `fc2` (`mlp → dim`). LayerNorm (eps [`LN_EPS`]) and GELU are written out in primitive
//!   ops as `torch.onnx.export` does below opset 17, linear layers as `MatMul` with the
//!   transposed weight and `Add` of the bias;
//! - the final LayerNorm (`norm`), then the outputs, in this order:
//!   - [`CLS_OUTPUT`] `cls_embedding`, f32 `[batch, dim]`: the CLS token after the final norm;
//!   - [`SALIENCY_OUTPUT`] `saliency`, f32 `[batch, grid, grid]`: a per-patch linear layer
//!     `dim → 1` (`saliency_head`) over the final patch tokens, row-major over the patch grid;
//!   - [`LOGITS_OUTPUT`] `logits`, f32 `[batch, classes]`: the classifier `head` on the CLS
//!     embedding.
//!
//! `python/vit_reference.py` computes the same forward pass in NumPy from the weights written
//! as safetensors ([`Weights::write_safetensors`]); `tests/tests/vit.rs` checks one against
//! the other and quantizes the model.

use std::path::{Path, PathBuf};

use kenosis_quantize::onnx::{self, attr, tensor, GraphProto, TensorProto};

use crate::graph::{model, raw_f32, value_info, Dim, GraphWriter};

/// Output index of `cls_embedding` `[batch, dim]`.
pub const CLS_OUTPUT: usize = 0;
/// Output index of `saliency` `[batch, grid, grid]`.
pub const SALIENCY_OUTPUT: usize = 1;
/// Output index of `logits` `[batch, classes]`.
pub const LOGITS_OUTPUT: usize = 2;

/// timm's LayerNorm epsilon for ViTs.
pub const LN_EPS: f32 = 1e-6;

/// The standard deviation of timm's truncated-normal initialization of linear layers, the
/// CLS token and the position embedding.
pub const INIT_STD: f64 = 0.02;

/// The sizes of a ViT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Side of the square input image, pixels.
    pub image: usize,
    /// Side of a square patch, pixels (the patch embedding's kernel and stride).
    pub patch: usize,
    /// Input channels.
    pub channels: usize,
    /// Embedding width.
    pub dim: usize,
    /// Transformer blocks.
    pub depth: usize,
    /// Attention heads (dividing `dim`).
    pub heads: usize,
    /// Hidden width of the MLPs.
    pub mlp: usize,
    /// Classes of the `head` classifier.
    pub classes: usize,
    /// Seed of [`Weights::random`] (non-zero).
    pub seed: u64,
}

impl Config {
    /// ViT-S/16 at 224 pixels (timm's `vit_small_patch16_224`: 384 wide, 12 blocks of 6
    /// heads, MLP 1536, 1000 classes; 22M parameters, 88 MB in FP32): the benchmark's.
    pub const SMALL: Config = Config {
        image: 224,
        patch: 16,
        channels: 3,
        dim: 384,
        depth: 12,
        heads: 6,
        mlp: 1536,
        classes: 1000,
        seed: 0x5EED_0056,
    };

    /// A ViT-Ti/16-wide model of 4 blocks at 224 pixels (192 wide, 3 heads, MLP 768, 1000
    /// classes; 2M parameters): the test's, quick to quantize in a debug build.
    pub const TINY: Config = Config {
        image: 224,
        patch: 16,
        channels: 3,
        dim: 192,
        depth: 4,
        heads: 3,
        mlp: 768,
        classes: 1000,
        seed: 0x5EED_0056,
    };

    /// Patches along each side of the image.
    pub fn grid(&self) -> usize {
        self.image / self.patch
    }

    /// Patches in all.
    pub fn patches(&self) -> usize {
        self.grid() * self.grid()
    }

    /// Dimensions per head.
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// The sizes as JSON, for `python/vit_reference.py`.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "image": self.image,
            "patch": self.patch,
            "channels": self.channels,
            "dim": self.dim,
            "depth": self.depth,
            "heads": self.heads,
            "mlp": self.mlp,
            "classes": self.classes,
            "ln_eps": LN_EPS,
        })
        .to_string()
    }

    /// Checks that the sizes make a ViT.
    ///
    /// # Errors
    /// When the patch does not tile the image, the heads do not divide `dim`, a size is 0 or
    /// the seed is 0.
    pub fn check(&self) -> Result<(), String> {
        let sizes = [
            self.image,
            self.patch,
            self.channels,
            self.dim,
            self.depth,
            self.heads,
            self.mlp,
            self.classes,
        ];
        if sizes.contains(&0) || self.seed == 0 {
            return Err(format!("{self:?}: a size or the seed is 0"));
        }
        if !self.image.is_multiple_of(self.patch) || !self.dim.is_multiple_of(self.heads) {
            return Err(format!(
                "{self:?}: the patch must tile the image and the heads divide dim"
            ));
        }
        Ok(())
    }

    /// The name and shape of every weight, in timm's names and PyTorch's layouts.
    pub fn tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (d, m) = (self.dim, self.mlp);
        let mut t: Vec<(String, Vec<usize>)> = vec![
            (
                "patch_embed.proj.weight".into(),
                vec![d, self.channels, self.patch, self.patch],
            ),
            ("patch_embed.proj.bias".into(), vec![d]),
            ("cls_token".into(), vec![1, 1, d]),
            ("pos_embed".into(), vec![1, self.patches() + 1, d]),
        ];
        for i in 0..self.depth {
            let p = format!("blocks.{i}");
            for (name, dims) in [
                ("norm1.weight", vec![d]),
                ("norm1.bias", vec![d]),
                ("attn.qkv.weight", vec![3 * d, d]),
                ("attn.qkv.bias", vec![3 * d]),
                ("attn.proj.weight", vec![d, d]),
                ("attn.proj.bias", vec![d]),
                ("norm2.weight", vec![d]),
                ("norm2.bias", vec![d]),
                ("mlp.fc1.weight", vec![m, d]),
                ("mlp.fc1.bias", vec![m]),
                ("mlp.fc2.weight", vec![d, m]),
                ("mlp.fc2.bias", vec![d]),
            ] {
                t.push((format!("{p}.{name}"), dims));
            }
        }
        t.extend([
            ("norm.weight".into(), vec![d]),
            ("norm.bias".into(), vec![d]),
            ("saliency_head.weight".into(), vec![1, d]),
            ("saliency_head.bias".into(), vec![1]),
            ("head.weight".into(), vec![self.classes, d]),
            ("head.bias".into(), vec![self.classes]),
        ]);
        t
    }
}

/// A source of random numbers: splitmix64 (Steele et al. 2014), a fixed sequence per seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-bound, bound).
    fn uniform(&mut self, bound: f64) -> f64 {
        (2.0 * self.unit() - 1.0) * bound
    }

    /// Normal of standard deviation `std` truncated to ±2 `std` (rejection), from
    /// Box–Muller pairs.
    fn trunc_normal(&mut self, std: f64) -> f64 {
        loop {
            let (u, v) = (self.unit(), self.unit());
            let r = (-2.0 * u.ln()).sqrt();
            let angle = 2.0 * std::f64::consts::PI * v;
            for z in [r * angle.cos(), r * angle.sin()] {
                if z.abs() <= 2.0 {
                    return z * std;
                }
            }
        }
    }
}

/// A ViT's named FP32 weights, in [`Config::tensors`]'s order.
pub struct Weights {
    pub config: Config,
    /// `(name, PyTorch shape, values row-major)`.
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl Weights {
    /// Random weights with timm's ViT initialization (`init_weights_vit_timm`): linear
    /// weights, `cls_token` and `pos_embed` truncated normal of std [`INIT_STD`], linear biases
    /// 0, LayerNorm weights 1 and biases 0; the patch-embedding Conv as PyTorch initializes a
    /// Conv (weight and bias uniform in ±1/√fan_in). Deterministic in `config.seed`: the same
    /// config gives the same bytes on every machine.
    ///
    /// # Errors
    /// As [`Config::check`].
    pub fn random(config: Config) -> Result<Self, String> {
        config.check()?;
        let mut rng = SplitMix(config.seed);
        let fan_in = (config.channels * config.patch * config.patch) as f64;
        let tensors = config
            .tensors()
            .into_iter()
            .map(|(name, dims)| {
                let n: usize = dims.iter().product();
                let values: Vec<f32> = if name.starts_with("patch_embed") {
                    (0..n)
                        .map(|_| rng.uniform(1.0 / fan_in.sqrt()) as f32)
                        .collect()
                } else if name.contains("norm") && name.ends_with(".weight") {
                    vec![1.0; n]
                } else if name.ends_with(".bias") {
                    vec![0.0; n]
                } else {
                    (0..n).map(|_| rng.trunc_normal(INIT_STD) as f32).collect()
                };
                (name, dims, values)
            })
            .collect();
        Ok(Self { config, tensors })
    }

    /// Parameters in all.
    pub fn parameters(&self) -> usize {
        self.tensors.iter().map(|t| t.2.len()).sum()
    }

    fn get(&self, name: &str) -> &(String, Vec<usize>, Vec<f32>) {
        self.tensors
            .iter()
            .find(|t| t.0 == name)
            .unwrap_or_else(|| panic!("{name} is one of Config::tensors"))
    }

    /// Tensor `name` as an initializer of the same name, in its own layout.
    fn initializer(&self, name: &str) -> TensorProto {
        let (_, dims, values) = self.get(name);
        raw_f32(
            name,
            dims,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    /// The `[out, in]` weight of linear layer `name` transposed to the `[in, out]`
    /// initializer `name` that `MatMul` takes.
    fn transposed(&self, name: &str) -> TensorProto {
        let (_, dims, values) = self.get(name);
        let (out_f, in_f) = (dims[0], dims[1]);
        let mut raw = vec![0u8; values.len() * 4];
        for o in 0..out_f {
            for i in 0..in_f {
                let d = (i * out_f + o) * 4;
                raw[d..d + 4].copy_from_slice(&values[o * in_f + i].to_le_bytes());
            }
        }
        raw_f32(name, &[in_f, out_f], raw)
    }

    /// Writes the weights as a safetensors file (F32, PyTorch layouts), as timm would save
    /// them, for `python/vit_reference.py`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_safetensors(&self, path: &Path) -> Result<(), String> {
        use safetensors::tensor::TensorView;
        let bytes: Vec<Vec<u8>> = self
            .tensors
            .iter()
            .map(|t| t.2.iter().flat_map(|v| v.to_le_bytes()).collect())
            .collect();
        let views = self
            .tensors
            .iter()
            .zip(&bytes)
            .map(|(t, b)| {
                TensorView::new(safetensors::Dtype::F32, t.1.clone(), b)
                    .map(|v| (t.0.clone(), v))
                    .map_err(|e| format!("{}: {e}", t.0))
            })
            .collect::<Result<Vec<_>, _>>()?;
        safetensors::serialize_to_file(views, None, path)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// A FLOAT initializer from little-endian bytes.
/// The graph under construction.
struct Builder<'w> {
    g: GraphProto,
    w: &'w Weights,
}

impl GraphWriter for Builder<'_> {
    fn graph(&mut self) -> &mut GraphProto {
        &mut self.g
    }
}

impl Builder<'_> {
    fn constants(&mut self) {
        let c = self.w.config;
        let (d, h, hd) = (c.dim as i64, c.heads as i64, c.head_dim() as i64);
        let g = c.grid() as i64;
        self.g.initializer.extend([
            tensor::from_f32("one", &[], &[1.0]),
            tensor::from_f32("two", &[], &[2.0]),
            tensor::from_f32("half", &[], &[0.5]),
            tensor::from_f32("sqrt_two", &[], &[std::f32::consts::SQRT_2]),
            tensor::from_f32("ln_eps", &[], &[LN_EPS]),
            tensor::from_f32("attn_scale", &[], &[(hd as f32).powf(-0.5)]),
            tensor::from_i64("i0", &[], &[0]),
            tensor::from_i64("i1", &[], &[1]),
            tensor::from_i64("i2", &[], &[2]),
            tensor::from_i64("starts_0", &[1], &[0]),
            tensor::from_i64("ends_1", &[1], &[1]),
            tensor::from_i64("ends_max", &[1], &[i64::MAX]),
            tensor::from_i64("axes_1", &[1], &[1]),
            tensor::from_i64("one_dim", &[2], &[1, d]),
            tensor::from_i64("patches_shape", &[3], &[0, d, -1]),
            tensor::from_i64("qkv_shape", &[5], &[0, 0, 3, h, hd]),
            tensor::from_i64("merged_shape", &[3], &[0, 0, d]),
            tensor::from_i64("grid_shape", &[3], &[0, g, g]),
        ]);
    }

    /// `x · Wᵀ + b` for the linear layer `prefix`.
    fn linear(&mut self, x: &str, prefix: &str) -> String {
        let (w, b) = (format!("{prefix}.weight"), format!("{prefix}.bias"));
        let weight = self.w.transposed(&w);
        let bias = self.w.initializer(&b);
        self.g.initializer.extend([weight, bias]);
        self.matmul_add(x, prefix)
    }

    /// LayerNorm over the last axis, in primitive ops.
    fn layer_norm(&mut self, x: &str, prefix: &str) -> String {
        let (w, b) = (format!("{prefix}.weight"), format!("{prefix}.bias"));
        let (gamma, beta) = (self.w.initializer(&w), self.w.initializer(&b));
        self.g.initializer.extend([gamma, beta]);
        self.layer_norm_ops(x, prefix)
    }

    /// Patch embedding, CLS token and position embedding: `[batch, patches + 1, dim]`.
    fn embeddings(&mut self) -> String {
        let c = self.w.config;
        let (w, b) = ("patch_embed.proj.weight", "patch_embed.proj.bias");
        let (weight, bias) = (self.w.initializer(w), self.w.initializer(b));
        let (cls, pos) = (
            self.w.initializer("cls_token"),
            self.w.initializer("pos_embed"),
        );
        self.g.initializer.extend([weight, bias, cls, pos]);
        let p = c.patch as i64;
        let conv = self.node_with(
            "Conv",
            &["pixel_values", w, b],
            "patch_embed/proj",
            vec![
                attr::make_ints("kernel_shape", &[p, p]),
                attr::make_ints("strides", &[p, p]),
            ],
        );
        let flat = self.node("Reshape", &[&conv, "patches_shape"], "patch_embed/flatten");
        let tokens = self.node_with(
            "Transpose",
            &[&flat],
            "patch_embed/tokens",
            vec![attr::make_ints("perm", &[0, 2, 1])],
        );
        // cls_token.expand(batch, -1, -1)
        let shape = self.node("Shape", &["pixel_values"], "cls/input_shape");
        let batch = self.node_with(
            "Slice",
            &[&shape, "starts_0", "ends_1"],
            "cls/batch",
            vec![],
        );
        let target = self.node_with(
            "Concat",
            &[&batch, "one_dim"],
            "cls/shape",
            vec![attr::make_int("axis", 0)],
        );
        let cls = self.node("Expand", &["cls_token", &target], "cls/expanded");
        let seq = self.node_with(
            "Concat",
            &[&cls, &tokens],
            "embeddings/concat",
            vec![attr::make_int("axis", 1)],
        );
        self.node("Add", &[&seq, "pos_embed"], "embeddings/pos")
    }

    /// `x + attn(norm1(x))` of block `prefix`.
    fn attention(&mut self, x: &str, prefix: &str) -> String {
        let n = self.layer_norm(x, &format!("{prefix}.norm1"));
        let attn = format!("{prefix}.attn");
        let qkv = self.linear(&n, &format!("{attn}.qkv"));
        let qkv = self.node(
            "Reshape",
            &[&qkv, "qkv_shape"],
            &format!("{attn}/qkv_heads"),
        );
        let qkv = self.node_with(
            "Transpose",
            &[&qkv],
            &format!("{attn}/qkv_t"),
            vec![attr::make_ints("perm", &[2, 0, 3, 1, 4])],
        );
        let mut pick = |i: &str, which: &str| {
            self.node_with(
                "Gather",
                &[&qkv, i],
                &format!("{attn}/{which}"),
                vec![attr::make_int("axis", 0)],
            )
        };
        let (q, k, v) = (pick("i0", "q"), pick("i1", "k"), pick("i2", "v"));
        let kt = self.node_with(
            "Transpose",
            &[&k],
            &format!("{attn}/k_t"),
            vec![attr::make_ints("perm", &[0, 1, 3, 2])],
        );
        let s = self.node("MatMul", &[&q, &kt], &format!("{attn}/scores"));
        let s = self.node("Mul", &[&s, "attn_scale"], &format!("{attn}/scaled"));
        let ctx = self.attention_context(&s, &v, &attn, "merged_shape");
        let o = self.linear(&ctx, &format!("{attn}.proj"));
        self.node("Add", &[x, &o], &format!("{prefix}/attn_residual"))
    }

    /// `x + mlp(norm2(x))` of block `prefix`.
    fn mlp(&mut self, x: &str, prefix: &str) -> String {
        let n = self.layer_norm(x, &format!("{prefix}.norm2"));
        let up = self.linear(&n, &format!("{prefix}.mlp.fc1"));
        let act = self.gelu(&up, &format!("{prefix}.mlp"));
        let down = self.linear(&act, &format!("{prefix}.mlp.fc2"));
        self.node("Add", &[x, &down], &format!("{prefix}/mlp_residual"))
    }

    /// The final norm and the three outputs.
    fn heads(&mut self, x: &str) {
        let n = self.layer_norm(x, "norm");
        self.node_with(
            "Gather",
            &[&n, "i0"],
            "cls_embedding",
            vec![attr::make_int("axis", 1)],
        );
        let patches = self.node_with(
            "Slice",
            &[&n, "ends_1", "ends_max", "axes_1"],
            "saliency/patch_tokens",
            vec![],
        );
        let s = self.linear(&patches, "saliency_head");
        self.node("Reshape", &[&s, "grid_shape"], "saliency");
        let logits = self.linear("cls_embedding", "head");
        self.node("Identity", &[&logits], "logits");
    }
}

/// The graph of the ViT of `weights`; see the module documentation.
pub fn build_graph(weights: &Weights) -> GraphProto {
    let c = weights.config;
    let mut b = Builder {
        g: GraphProto {
            name: Some(format!("vit-d{}-l{}-random", c.dim, c.depth)),
            ..Default::default()
        },
        w: weights,
    };
    b.constants();
    let mut x = b.embeddings();
    for i in 0..c.depth {
        let prefix = format!("blocks.{i}");
        x = b.attention(&x, &prefix);
        x = b.mlp(&x, &prefix);
    }
    b.heads(&x);
    // Float, of dims `batch` (symbolic) then `dims`.
    let io = |name: &str, dims: &[usize]| {
        let dims: Vec<Dim> = std::iter::once(Dim::Named("batch"))
            .chain(dims.iter().map(|&d| Dim::Fixed(d)))
            .collect();
        value_info(name, onnx::DataType::Float, &dims)
    };
    b.g.input = vec![io("pixel_values", &[c.channels, c.image, c.image])];
    b.g.output = vec![
        io("cls_embedding", &[c.dim]),
        io("saliency", &[c.grid(), c.grid()]),
        io("logits", &[c.classes]),
    ];
    b.g
}

/// [`build_graph`] encoded as a model (opset 13, IR version 8).
pub fn build_model(weights: &Weights) -> Vec<u8> {
    model(build_graph(weights))
}

/// The ONNX file name of the random ViT of `config` (its sizes and seed in the name).
pub fn onnx_file(config: &Config) -> String {
    format!(
        "vit-p{}-d{}-l{}-h{}-random-{:x}.onnx",
        config.patch, config.dim, config.depth, config.heads, config.seed
    )
}

/// The ONNX file of the random ViT of `config` in `dir` ([`onnx_file`]), built and written
/// when absent (a few seconds for [`Config::SMALL`], 88 MB). Returns its path.
///
/// # Errors
/// As [`Weights::random`], or when the file cannot be written.
pub fn ensure_onnx(dir: &Path, config: Config) -> Result<PathBuf, String> {
    let path = dir.join(onnx_file(&config));
    if path.is_file() {
        return Ok(path);
    }
    let bytes = build_model(&Weights::random(config)?);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Written aside and renamed: a build cut short leaves no truncated model behind.
    let partial = dir.join(format!("{}.partial", onnx_file(&config)));
    std::fs::write(&partial, &bytes).map_err(|e| format!("{}: {e}", partial.display()))?;
    std::fs::rename(&partial, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The fraction of the `keep` largest values of `a` and of `b` (each map thresholded at its
/// own top `keep`) that are the same positions: `|top(a) ∩ top(b)| / |top(a) ∪ top(b)|`, the
/// intersection over union of the two salient regions. Ties are broken by position. 1 for
/// identical rankings; `a` and `b` have the same length, `keep` at most that length.
pub fn top_region_iou(a: &[f32], b: &[f32], keep: usize) -> f64 {
    let top = |v: &[f32]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[j].total_cmp(&v[i]).then(i.cmp(&j)));
        let mut mask = vec![false; v.len()];
        for &i in &idx[..keep.min(v.len())] {
            mask[i] = true;
        }
        mask
    };
    let (ta, tb) = (top(a), top(b));
    let inter = ta.iter().zip(&tb).filter(|(x, y)| **x && **y).count();
    let union = ta.iter().zip(&tb).filter(|(x, y)| **x || **y).count();
    if union == 0 {
        1.0
    } else {
        inter as f64 / union as f64
    }
}

/// ImageNet's per-channel mean and standard deviation of RGB in [0, 1] (timm's
/// `IMAGENET_DEFAULT_MEAN` and `_STD`), the normalization of [`load_image`].
pub const IMAGENET_MEAN_STD: ([f32; 3], [f32; 3]) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);

/// A JPEG as the ViT's `pixel_values` `[1, 3, image, image]`: RGB resized to `image`
/// (triangle filter), scaled to [0, 1] and normalized by [`IMAGENET_MEAN_STD`].
///
/// # Panics
/// When the file cannot be decoded.
pub fn load_image(path: &Path, image: usize) -> ndarray::Array4<f32> {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    let side = image as u32;
    let img = image::imageops::resize(&img, side, side, image::imageops::FilterType::Triangle);
    let (mean, std) = IMAGENET_MEAN_STD;
    let mut out = ndarray::Array4::<f32>::zeros((1, 3, image, image));
    for (x, y, p) in img.enumerate_pixels() {
        for c in 0..3 {
            out[[0, c, y as usize, x as usize]] = (f32::from(p[c]) / 255.0 - mean[c]) / std[c];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_has_vit_s16_parameter_count() {
        // timm's vit_small_patch16_224: 22,050,664 parameters, plus the 385 of the saliency
        // head.
        let n: usize = Config::SMALL
            .tensors()
            .iter()
            .map(|t| t.1.iter().product::<usize>())
            .sum();
        assert_eq!(n, 22_050_664 + 385);
    }

    #[test]
    fn random_weights_follow_the_init() {
        let w = Weights::random(Config::TINY).unwrap();
        let qkv = &w.get("blocks.0.attn.qkv.weight").2;
        let mean = qkv.iter().map(|&v| f64::from(v)).sum::<f64>() / qkv.len() as f64;
        let var = qkv
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / qkv.len() as f64;
        // A normal truncated at ±2σ has std 0.880σ.
        assert!(mean.abs() < 1e-3, "{mean}");
        assert!(
            (var.sqrt() - 0.880 * INIT_STD).abs() < 5e-4,
            "{}",
            var.sqrt()
        );
        assert!(qkv.iter().all(|v| f64::from(v.abs()) <= 2.0 * INIT_STD));
        assert!(w.get("blocks.0.norm1.weight").2.iter().all(|&v| v == 1.0));
        assert!(w.get("blocks.0.mlp.fc1.bias").2.iter().all(|&v| v == 0.0));
        let again = Weights::random(Config::TINY).unwrap();
        assert_eq!(w.tensors, again.tensors);
    }

    #[test]
    fn region_iou_counts_shared_top_positions() {
        let a = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0];
        assert_eq!(top_region_iou(&a, &a, 2), 1.0);
        // Top 2 of b: positions 0 and 2: one shared of three.
        let b = [5.0, 0.0, 4.0, 2.0, 1.0, 0.0];
        assert!((top_region_iou(&a, &b, 2) - 1.0 / 3.0).abs() < 1e-12);
        let c = [0.0, 0.0, 0.0, 0.0, 5.0, 4.0];
        assert_eq!(top_region_iou(&a, &c, 2), 0.0);
    }
}
