//! The Conv geometry [`PatchGram`] needs, read from a node's attributes. The second moments
//! themselves (`H = Σ x·xᵀ` over a Conv's input patches, for GPTQ rounding and the
//! saturation check) are computed in `kenosis-numerics` (see its `gram` module).

pub use kenosis_numerics::gram::{ConvGeometry, PatchGram, COLUMNS_PER_CONV};

use crate::onnx::{attr, NodeProto};

/// The geometry of a 2-D, ungrouped Conv with explicit padding and weight dims
/// `[O, C, kh, kw]`; `None` for anything else (grouped, 1-D/3-D, `auto_pad`).
pub fn conv_geometry(node: &NodeProto, weight_dims: &[i64]) -> Option<ConvGeometry> {
    let pair = |name: &str| -> Option<[usize; 2]> {
        match attr::ints(node, name).as_deref() {
            None => Some([1, 1]),
            Some(&[a, b]) if a > 0 && b > 0 => Some([a as usize, b as usize]),
            Some(_) => None,
        }
    };
    let auto_pad = attr::string(node, "auto_pad").unwrap_or_default();
    if node.op_type() != "Conv"
        || attr::int(node, "group", 1) != 1
        || weight_dims.len() != 4
        || !(auto_pad.is_empty() || auto_pad == "NOTSET")
    {
        return None;
    }
    let pads = match attr::ints(node, "pads").as_deref() {
        None => [0; 4],
        Some(p) if p.len() == 4 && p.iter().all(|&v| v >= 0) => {
            [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
        }
        Some(_) => return None,
    };
    Some(ConvGeometry {
        kernel: [weight_dims[2] as usize, weight_dims[3] as usize],
        strides: pair("strides")?,
        pads,
        dilations: pair("dilations")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::make_node;

    #[test]
    fn explicit_pads_strides_and_dilations_are_read() {
        let node = make_node(
            "Conv",
            "c".into(),
            vec![],
            vec![],
            vec![
                attr::make_ints("pads", &[1, 0, 2, 0]),
                attr::make_ints("strides", &[2, 1]),
                attr::make_ints("dilations", &[1, 3]),
            ],
        );
        assert_eq!(
            conv_geometry(&node, &[4, 2, 3, 5]),
            Some(ConvGeometry {
                kernel: [3, 5],
                strides: [2, 1],
                pads: [1, 0, 2, 0],
                dilations: [1, 3],
            })
        );
    }

    #[test]
    fn grouped_and_auto_padded_convs_are_not_covered() {
        let grouped = make_node(
            "Conv",
            "dw".into(),
            vec![],
            vec![],
            vec![attr::make_int("group", 4)],
        );
        assert_eq!(conv_geometry(&grouped, &[4, 1, 3, 3]), None);
        let same = make_node(
            "Conv",
            "s".into(),
            vec![],
            vec![],
            vec![attr::make_string("auto_pad", "SAME_UPPER")],
        );
        assert_eq!(conv_geometry(&same, &[4, 2, 3, 3]), None);
    }
}
