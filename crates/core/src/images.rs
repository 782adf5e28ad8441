//! Decoding images that come from outside (client inputs, upstream results)
//! with limits: a small file can declare an enormous canvas (a PNG header
//! saying 60000x60000 is a few dozen bytes), and decoding it unchecked
//! allocates gigabytes. Every such decode goes through [`decode_bounded`],
//! and every size check through [`dimensions_bounded`], which reads the
//! header only.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, ImageReader, Limits};

/// Default cap on what one decode may allocate: a 4096x4096 image with four
/// 16-bit channels (128 MiB) with room for the decoder's own buffers.
pub const MAX_DECODE_ALLOC: u64 = 256 * 1024 * 1024;

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageLimitError {
    /// Not an image in a known format, or damaged.
    #[error("the data could not be decoded as an image")]
    Undecodable,
    /// The header declares a side longer than allowed.
    #[error("the image is {width}x{height} pixels: at most {max_side}x{max_side} is accepted")]
    TooLarge {
        width: u32,
        height: u32,
        max_side: u32,
    },
    /// Decoding would allocate more than allowed.
    #[error("decoding the image needs more memory than allowed")]
    TooMuchMemory,
}

fn reader(bytes: &[u8]) -> Result<ImageReader<Cursor<&[u8]>>, ImageLimitError> {
    ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|_| ImageLimitError::Undecodable)
}

/// The image's width and height from its header, without decoding pixels;
/// a side over `max_side` is refused.
pub fn dimensions_bounded(bytes: &[u8], max_side: u32) -> Result<(u32, u32), ImageLimitError> {
    let (width, height) = reader(bytes)?
        .into_dimensions()
        .map_err(|_| ImageLimitError::Undecodable)?;
    if width > max_side || height > max_side {
        return Err(ImageLimitError::TooLarge {
            width,
            height,
            max_side,
        });
    }
    Ok((width, height))
}

/// The decoded image, refused when its header declares a side over
/// `max_side` (checked before any pixel buffer is allocated) or when the
/// decoder would allocate more than `max_alloc` bytes.
pub fn decode_bounded(
    bytes: &[u8],
    max_side: u32,
    max_alloc: u64,
) -> Result<DynamicImage, ImageLimitError> {
    // The header first: its declared size names the problem precisely.
    dimensions_bounded(bytes, max_side)?;
    let mut reader = reader(bytes)?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(max_side);
    limits.max_image_height = Some(max_side);
    limits.max_alloc = Some(max_alloc);
    reader.limits(limits);
    reader.decode().map_err(|err| match err {
        image::ImageError::Limits(_) => ImageLimitError::TooMuchMemory,
        _ => ImageLimitError::Undecodable,
    })
}

/// The format the bytes look like, as [`decode_bounded`] would guess it.
pub fn guessed_format(bytes: &[u8]) -> Option<ImageFormat> {
    reader(bytes).ok()?.format()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG signature and an IHDR chunk (with a correct CRC) declaring
    /// `width` x `height` RGBA, followed by a tiny IDAT and IEND: well under
    /// a hundred bytes for any declared size.
    fn png_declaring(width: u32, height: u32) -> Vec<u8> {
        fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
            out.extend_from_slice(&u32::try_from(data.len()).expect("small").to_be_bytes());
            let start = out.len();
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            let crc = crc32(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        }
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
        chunk(&mut png, b"IHDR", &ihdr);
        // zlib: an empty stored block (no pixel data at all).
        chunk(
            &mut png,
            b"IDAT",
            &[0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 1],
        );
        chunk(&mut png, b"IEND", &[]);
        png
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffff_u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn small_png() -> Vec<u8> {
        let mut bytes = Vec::new();
        DynamicImage::new_rgb8(3, 2)
            .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
            .expect("encodes");
        bytes
    }

    #[test]
    fn images_header_declaring_a_huge_canvas_is_refused_before_decoding() {
        let png = png_declaring(60_000, 60_000);
        assert!(png.len() < 100, "{} bytes", png.len());
        assert_eq!(
            dimensions_bounded(&png, 4096),
            Err(ImageLimitError::TooLarge {
                width: 60_000,
                height: 60_000,
                max_side: 4096
            })
        );
        // A generous side limit still leaves the allocation cap: 60000x60000
        // RGBA would need 14.4 GB, and the decoder refuses before allocating.
        assert_eq!(
            decode_bounded(&png, 4096, MAX_DECODE_ALLOC).unwrap_err(),
            ImageLimitError::TooLarge {
                width: 60_000,
                height: 60_000,
                max_side: 4096
            }
        );
        assert_eq!(
            decode_bounded(&png, 100_000, MAX_DECODE_ALLOC).unwrap_err(),
            ImageLimitError::TooMuchMemory
        );
    }

    #[test]
    fn images_within_the_limits_decode() {
        let png = small_png();
        assert_eq!(dimensions_bounded(&png, 4096), Ok((3, 2)));
        let image = decode_bounded(&png, 4096, MAX_DECODE_ALLOC).expect("decodes");
        assert_eq!((image.width(), image.height()), (3, 2));
        assert_eq!(guessed_format(&png), Some(ImageFormat::Png));
        assert_eq!(
            dimensions_bounded(&png, 2),
            Err(ImageLimitError::TooLarge {
                width: 3,
                height: 2,
                max_side: 2
            })
        );
        assert_eq!(
            decode_bounded(b"not an image", 4096, MAX_DECODE_ALLOC).unwrap_err(),
            ImageLimitError::Undecodable
        );
    }
}
