import torch

from training.trainer.loss import rl_loss


def test_on_policy_gradient_is_the_policy_gradient() -> None:
    logits = torch.randn(2, 4, requires_grad=True)
    lp = torch.log_softmax(logits, -1)[:, 0].unsqueeze(0)  # [1, 2]
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    st = rl_loss(lp, lp.detach(), adv, mask, total_tokens=2, ratio_low=0.1, ratio_high=10)
    st.loss_sum.backward()
    g1 = logits.grad.clone()
    logits.grad = None
    lp2 = torch.log_softmax(logits, -1)[:, 0].unsqueeze(0)
    (-(lp2 * adv).sum() / 2).backward()
    assert torch.allclose(g1, logits.grad)
    assert st.mismatch_kl_sum == 0.0 and st.masked == 0.0


def test_tokens_outside_the_ratio_bounds_are_masked() -> None:
    lp = torch.tensor([[0.0, -1.0, -1.0]], requires_grad=True)
    inf = torch.tensor([[0.0, -1.0, -5.0]])  # the last token's ratio is e^4, above 8
    st = rl_loss(lp, inf, torch.ones(1, 3), torch.tensor([[0.0, 1.0, 1.0]]), 2, 0.125, 8.0)
    st.loss_sum.backward()
    assert st.masked == 1.0 and st.tokens == 2.0
    assert lp.grad is not None and lp.grad[0, 2] == 0 and lp.grad[0, 1] != 0
    assert st.mismatch_kl_sum > 0
