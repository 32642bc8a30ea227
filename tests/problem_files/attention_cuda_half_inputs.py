import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """
    Attention over inputs the file places on the GPU itself, in half precision (as an older
    KernelBench attention file did), plus a bias buffer it moves there with .cuda().
    """
    def __init__(self, embed):
        super(Model, self).__init__()
        self.register_buffer("bias", torch.linspace(0, 1, embed).half().cuda())

    def forward(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(Q, K, V) + self.bias

batch_size = 16
num_heads = 16
sequence_length = 256 * 2
embedding_dimension = 512

def get_inputs():
    Q = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension, device='cuda', dtype=torch.float16)
    K = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension, dtype=torch.float16).cuda()
    V = torch.rand(batch_size, num_heads, sequence_length, embedding_dimension).to('cuda', torch.float16)
    return [Q, K, V]

def get_init_inputs():
    return [embedding_dimension]
