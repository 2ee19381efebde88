"""The Chinchilla parametric law and the published fits we compare against.

L(N, D) = E + A / N^alpha + B / D^beta   (Hoffmann et al. 2022, eq. 2)

Minimising L under the constraint C = 6 N D gives (Hoffmann et al., appendix D.2)
    N_opt(C) = G (C/6)^a,   D_opt(C) = G^-1 (C/6)^b,
    G = (alpha A / (beta B))^(1/(alpha+beta)),   a = beta/(alpha+beta),   b = alpha/(alpha+beta).
Along that optimum both reducible terms fall as (C/6)^(-alpha*beta/(alpha+beta)), so the
compute frontier is exactly E + k C^-gamma with gamma = alpha*beta/(alpha+beta).
"""

from dataclasses import dataclass, asdict

import numpy as np

FLOPS_PER_PARAM_TOKEN = 6.0          # C ~= 6 N D (forward + backward, no attention term)
CHINCHILLA_TOKENS_PER_PARAM = 20.0   # the rule of thumb quoted from Hoffmann et al.
KAPLAN_N_OPT_EXPONENT = 0.73         # Kaplan et al. 2020: N_opt proportional to C^0.73


@dataclass(frozen=True)
class ParametricLaw:
    E: float
    A: float
    B: float
    alpha: float
    beta: float

    def loss(self, N, D):
        N, D = np.asarray(N, float), np.asarray(D, float)
        return self.E + self.A / N ** self.alpha + self.B / D ** self.beta

    @property
    def a(self):
        """Exponent of N_opt in C."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self):
        """Exponent of D_opt in C."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def G(self):
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    @property
    def frontier_exponent(self):
        """gamma of the compute-optimal loss E + k C^-gamma implied by this law."""
        return self.alpha * self.beta / (self.alpha + self.beta)

    def optimal_N(self, C):
        return self.G * (np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN) ** self.a

    def optimal_D(self, C):
        return (np.asarray(C, float) / FLOPS_PER_PARAM_TOKEN) ** self.b / self.G

    def tokens_per_param(self, C):
        return self.optimal_D(C) / self.optimal_N(C)

    def as_dict(self):
        return asdict(self)


# Hoffmann et al. 2022 (Approach 3) and Besiroglu et al. 2024 (Epoch AI's replication).
CHINCHILLA = ParametricLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
EPOCH_2024 = ParametricLaw(E=1.82, A=482.0, B=2085.4, alpha=0.348, beta=0.366)
LAWS_BY_NAME = {"chinchilla": CHINCHILLA, "epoch": EPOCH_2024}


def reference_block():
    """The `references` object written into OUT.json."""
    return {
        "chinchilla": dict(CHINCHILLA.as_dict(), a=CHINCHILLA.a, b=CHINCHILLA.b,
                           tokens_per_param_rule_of_thumb=CHINCHILLA_TOKENS_PER_PARAM),
        "epoch2024": dict(EPOCH_2024.as_dict(), a=EPOCH_2024.a, b=EPOCH_2024.b),
        "kaplan": {"a": KAPLAN_N_OPT_EXPONENT},
    }


def chinchilla_rule_N(C):
    """N_opt under 'C = 6ND with 20 tokens per parameter': N = sqrt(C / 120)."""
    return np.sqrt(np.asarray(C, float) / (FLOPS_PER_PARAM_TOKEN * CHINCHILLA_TOKENS_PER_PARAM))
