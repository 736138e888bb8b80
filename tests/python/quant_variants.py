"""Block-quantized copies of a float GGUF model, written with the `gguf` package (gguf-py's numpy
ports of ggml's reference quantizers): every 2-D tensor whose rows are whole blocks becomes
`qtype`, the rest stays as it is (as llama-quantize falls back). Deterministic: the same input and
type give the same bytes, so greedy goldens taken once from llama.cpp on these files hold."""

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

SKIP_FIELDS = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count")


def copy_metadata(reader, writer, skip=()) -> None:
    """Every key of `reader` but the header's, the architecture (GGUFWriter writes those) and
    `skip`'s."""
    for name, field in reader.fields.items():
        if name in SKIP_FIELDS or name == "general.architecture" or name in skip:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)


def write_variant(src: str, dst: str, qtype: str) -> None:
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    copy_metadata(reader, writer)
    target = getattr(Q, qtype)
    block = gguf.GGML_QUANT_SIZES[target][0]
    for t in reader.tensors:
        data = np.asarray(t.data)
        shape = [int(d) for d in reversed(t.shape)]  # ggml ne order -> numpy order
        if t.tensor_type == Q.F32 and len(shape) == 2 and shape[-1] % block == 0:
            q = gguf.quants.quantize(data.reshape(shape).astype(np.float32), target)
            writer.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=target)
        else:
            writer.add_tensor(t.name, data.reshape(shape) if len(shape) > 1 else data,
                              raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    import sys
    write_variant(sys.argv[1], sys.argv[2], sys.argv[3])
