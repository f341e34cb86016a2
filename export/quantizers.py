"""PT2E quantizers for the int8 exporters, completed so that TFLite graphs are fully int8.

The LiteRT PT2E quantizer annotates conv/linear/add/mul/cat/sigmoid/softmax and a few layout
ops; anything else (PReLU, tanh, sub, select, unsqueeze, transpose, pad, ...) stays float and
the converter wraps it in DEQUANTIZE/QUANTIZE: the graph is no longer integer-only and cannot
run on an int8-only MCU kernel set. ``complete_int8_annotation`` walks the graph after the
stock annotator and gives every remaining float op a quantisation spec:

* layout ops (view/reshape/permute/transpose/select/slice/(un)squeeze/pad/flatten/clone) share
  their input's quantisation parameters (no requantisation, the values are copied);
* tanh gets TFLite's fixed output scale 1/128 (zero point 0), sigmoid and softmax 1/256
  (zp -128);
* activation x activation matmuls (attention weights x values) get int8 inputs and output;
* PReLU gets int8 activations and int8 per-tensor slopes;
* every other elementwise op gets int8 input and output observers.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

_aten = torch.ops.aten

SHARED_OPS = {
    _aten.view.default,
    _aten.view_copy.default,
    _aten.reshape.default,
    _aten._unsafe_view.default,
    _aten.permute.default,
    _aten.permute_copy.default,
    _aten.transpose.int,
    _aten.t.default,
    _aten.select.int,
    _aten.slice.Tensor,
    _aten.slice_copy.Tensor,
    _aten.squeeze.dim,
    _aten.squeeze.dims,
    _aten.squeeze.default,
    _aten.squeeze_copy.dim,
    _aten.unsqueeze.default,
    _aten.unsqueeze_copy.default,
    _aten.flatten.using_ints,
    _aten.clone.default,
    _aten.contiguous.default,
    _aten.expand.default,
    _aten.unflatten.int,
    _aten.alias.default,
    _aten.hardtanh.default,
    _aten.relu.default,
    _aten.max_pool1d.default,
}
PAD_OPS = {_aten.constant_pad_nd.default, _aten.pad.default}
TANH_OPS = {_aten.tanh.default}
SIGMOID_OPS = {_aten.sigmoid.default}
ELEMENTWISE_OPS = {
    _aten.sub.Tensor,
    _aten.neg.default,
    _aten.add.Tensor,
    _aten.mul.Tensor,
    _aten.leaky_relu.default,
    _aten.elu.default,
    _aten.gelu.default,
    _aten.silu.default,
    _aten.abs.default,
    _aten.mean.dim,
    _aten.sum.dim_IntList,
    _aten.div.Tensor,
    _aten.clamp.default,
    _aten.minimum.default,
    _aten.maximum.default,
    _aten.cat.default,
}
PRELU_OPS = {_aten.prelu.default, _aten._prelu_kernel.default}
SOFTMAX_OPS = {_aten.softmax.int, _aten._softmax.default}
MATMUL_OPS = {_aten.matmul.default, _aten.bmm.default}


def _is_float_tensor(n) -> bool:
    if not isinstance(n, Node):
        return False
    v = n.meta.get("val")
    if v is None and n.op == "get_attr":  # constants (e.g. PReLU slopes) carry no meta
        obj = n.graph.owning_module
        for part in str(n.target).split("."):
            obj = getattr(obj, part, None)
        v = obj
    return isinstance(v, torch.Tensor) and v.is_floating_point()


def _annotated(n: Node) -> bool:
    a = n.meta.get("quantization_annotation")
    return a is not None and getattr(a, "_annotated", False)


def _has_output_qspec(n: Node) -> bool:
    a = n.meta.get("quantization_annotation")
    return a is not None and a.output_qspec is not None


def _fixed(scale: float, zero_point: int):
    from torchao.quantization.pt2e.observer import FixedQParamsObserver
    from torchao.quantization.pt2e.quantizer import FixedQParamsQuantizationSpec

    del FixedQParamsObserver  # imported to fail early if torchao's layout changes
    return FixedQParamsQuantizationSpec(
        dtype=torch.int8,
        scale=scale,
        zero_point=zero_point,
        quant_min=-128,
        quant_max=127,
        qscheme=torch.per_tensor_affine,
    )


def complete_int8_annotation(gm: GraphModule, act_qspec, weight_qspec=None) -> GraphModule:
    """Annotate every float op the stock quantizer left out (see module docstring)."""
    from torchao.quantization.pt2e.quantizer import (
        QuantizationAnnotation,
        QuantizationSpec,
        SharedQuantizationSpec,
    )

    slope_qspec = QuantizationSpec(
        dtype=torch.int8,
        quant_min=-127,
        quant_max=127,
        qscheme=torch.per_tensor_symmetric,
        observer_or_fake_quant_ctr=act_qspec.observer_or_fake_quant_ctr,
    )
    if weight_qspec is not None:
        from torchao.quantization.pt2e.observer import MinMaxObserver

        slope_qspec = QuantizationSpec(
            dtype=torch.int8,
            quant_min=-127,
            quant_max=127,
            qscheme=torch.per_tensor_symmetric,
            observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12),
        )
    for n in gm.graph.nodes:
        if n.op != "call_function" or _annotated(n) or not _is_float_tensor(n):
            continue
        tensor_args = [a for a in n.args if _is_float_tensor(a)]
        if n.target == _aten.cat.default:
            tensor_args = [a for a in n.args[0] if _is_float_tensor(a)]
        if not tensor_args:
            continue
        src = tensor_args[0]
        if n.target in SHARED_OPS or n.target in PAD_OPS:
            if _has_output_qspec(src):
                shared = SharedQuantizationSpec(src)
                n.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={src: shared}, output_qspec=shared, _annotated=True
                )
            else:  # producer unannotated (a graph input): observe it here, share the output
                n.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map={src: act_qspec},
                    output_qspec=SharedQuantizationSpec((src, n)),
                    _annotated=True,
                )
            continue
        if n.target in TANH_OPS or n.target in SIGMOID_OPS:
            out = _fixed(1 / 128, 0) if n.target in TANH_OPS else _fixed(1 / 256, -128)
            n.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map={src: act_qspec}, output_qspec=out, _annotated=True
            )
            continue
        if n.target in SOFTMAX_OPS:  # TFLite's int8 softmax: output scale 1/256, zp -128
            n.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map={src: act_qspec}, output_qspec=_fixed(1 / 256, -128),
                _annotated=True,
            )
            continue
        if n.target in MATMUL_OPS:  # activation x activation (attention weights x values)
            # an input already quantised upstream keeps its parameters (no requantisation:
            # TFLite requires the layout ops between to keep one scale)
            n.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map={
                    a: SharedQuantizationSpec(a) if _has_output_qspec(a) else act_qspec
                    for a in tensor_args[:2]
                },
                output_qspec=act_qspec,
                _annotated=True,
            )
            continue
        if n.target in PRELU_OPS:
            qmap = {src: act_qspec}
            if len(tensor_args) > 1:
                qmap[tensor_args[1]] = slope_qspec
            n.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map=qmap, output_qspec=act_qspec, _annotated=True
            )
            continue
        if n.target in ELEMENTWISE_OPS:
            if n.target == _aten.cat.default:  # one domain for all inputs and the output
                first = tensor_args[0]
                shared = SharedQuantizationSpec((first, n))
                qmap = {first: act_qspec, **{a: shared for a in tensor_args[1:]}}
                n.meta["quantization_annotation"] = QuantizationAnnotation(
                    input_qspec_map=qmap, output_qspec=shared, _annotated=True
                )
                continue
            n.meta["quantization_annotation"] = QuantizationAnnotation(
                input_qspec_map={a: act_qspec for a in tensor_args},
                output_qspec=act_qspec,
                _annotated=True,
            )
    return gm


def _with_activation_observer(config, observer: str):
    """``config`` with its activation observer replaced (``minmax`` or ``histogram``)."""
    import dataclasses

    from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver

    ctr = {"minmax": MinMaxObserver, "histogram": HistogramObserver}[observer]
    act = dataclasses.replace(
        config.input_activation, observer_or_fake_quant_ctr=ctr.with_args(eps=2**-12)
    )
    return dataclasses.replace(config, input_activation=act, output_activation=act)


def decompose_silu(gm: GraphModule) -> GraphModule:
    """silu(x) -> x * sigmoid(x) in the graph: the LiteRT converter decomposes silu *after*
    quantisation (float LOGISTIC + MUL); written out, both pieces get int8 specs."""
    changed = False
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target in (_aten.silu.default, _aten.silu_.default):
            with gm.graph.inserting_before(n):
                sig = gm.graph.call_function(_aten.sigmoid.default, (n.args[0],))
                mul = gm.graph.call_function(_aten.mul.Tensor, (n.args[0], sig))
            for node in (sig, mul):
                node.meta = dict(n.meta)
            n.replace_all_uses_with(mul)
            gm.graph.erase_node(n)
            changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def litert_full_int8_quantizer(observer: str = "minmax"):
    """The LiteRT PT2E quantizer (per-channel symmetric weights, static int8 activations,
    ``observer`` for the activation ranges) with ``complete_int8_annotation`` run after its own
    annotation."""
    from litert_torch.quantize.pt2e_quantizer import (
        PT2EQuantizer,
        get_symmetric_quantization_config,
    )

    class FullInt8PT2EQuantizer(PT2EQuantizer):
        def transform_for_annotation(self, model):
            return decompose_silu(super().transform_for_annotation(model))

        def annotate(self, model):
            model = super().annotate(model)
            cfg = self.global_config
            return complete_int8_annotation(model, cfg.input_activation, cfg.weight)

    cfg = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False)
    return FullInt8PT2EQuantizer().set_global(_with_activation_observer(cfg, observer))


# layout ops XNNPACK lowers to a static reshape / transpose / slice / copy: their int8 input
# and output must carry one (scale, zero point) (xnn_define_static_reshape rejects anything
# else with xnn_status_invalid_parameter at load)
XNNPACK_LAYOUT_OPS = SHARED_OPS - {
    _aten.hardtanh.default,
    _aten.relu.default,
    _aten.max_pool1d.default,
}


def share_layout_qparams(gm: GraphModule) -> GraphModule:
    """Give every layout op the stock XNNPACK quantizer leaves unannotated its input's
    quantisation parameters (input and output share one observer).

    Unannotated, ``add -> unsqueeze -> cat`` quantises as ``q(add's scale) -> dq -> unsqueeze
    -> q(cat's scale)``; XNNPACK's partitioner folds that into one int8 reshape whose input
    and output scales differ, which XNNPACK refuses when the delegate is built ("Failed to
    create squeeze node ... xnn_status_invalid_parameter", the ``.pte`` does not load). The
    two scales come from two observers that saw nearly the same values, so whether they are
    bit-identical (and the file loads) depended on the float rounding of the exporting CPU
    (AVX-512 hosts differed in the last bit). Shared, they are one observer on every host.
    """
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec

    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in XNNPACK_LAYOUT_OPS or _annotated(n):
            continue
        if not _is_float_tensor(n) or not n.args or not _is_float_tensor(n.args[0]):
            continue
        src = n.args[0]
        if not _has_output_qspec(src):  # a float producer (graph input, float op): stays float
            continue
        shared = SharedQuantizationSpec(src)
        n.meta["quantization_annotation"] = QuantizationAnnotation(
            input_qspec_map={src: shared}, output_qspec=shared, _annotated=True
        )
    return gm


def xnnpack_quantizer():
    """ExecuTorch's XNNPACK quantizer, per-channel symmetric weights, static activations, with
    ``share_layout_qparams`` run after its own annotation (the ``.pte`` loads on every CPU)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    class SharedLayoutXNNPACKQuantizer(XNNPACKQuantizer):
        def annotate(self, model):
            return share_layout_qparams(super().annotate(model))

    return SharedLayoutXNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True)
    )
