# Sourced by the bench/device_*.sh scripts that build the Vulkan backend on the lent machine: the
# carried Debian packages in .vk/ (the Vulkan loader and libglvnd, which the NVIDIA ICD needs,
# unpacked where programs look for them; the SDK parts, headers and glslc, beside them in
# /tmp/vk), the NVIDIA ICD, and VK_CMAKE: the CMake flags of a Vulkan build against them.
for f in .vk/lib{vulkan1,glvnd0,egl1,opengl0,gl1,glx0,gles2}_*.deb; do dpkg -x "$f" /; done; ldconfig
mkdir -p /tmp/vk && for f in .vk/*.deb; do dpkg -x "$f" /tmp/vk; done
export LD_LIBRARY_PATH=/tmp/vk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $icd ] && export VK_DRIVER_FILES=$icd
V=/tmp/vk/usr
VK_CMAKE="-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$V/include -DVulkan_LIBRARY=$V/lib/x86_64-linux-gnu/libvulkan.so -DVulkan_GLSLC_EXECUTABLE=$V/bin/glslc -DSPIRV-Headers_DIR=$V/share/cmake/SPIRV-Headers"
