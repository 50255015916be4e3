"""What a deployed TensorRT engine is: its precision model, the CPU simulation of it, float layers like another engine's,
one engine file (build, bench), a recipe's engine jobs, and plugins (EfficientNMS) with their numpy twins."""
